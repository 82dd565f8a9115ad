"""Tools a multi-turn agent can call, the call formats it may write, and the built-in tools.

A call is `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (the Hermes format, Qwen's
native one, and the format rlvr teaches templates without tool support), or Llama 3.1's native
one: the whole reply is `{"name": ..., "parameters": {...}}`, optionally after <|python_tag|>.
Anything wrong with a call raises ToolCallError, whose message is written for the model: the env
shows it as the tool's result instead of ending the episode.

How the tools are shown to the model is the token layer's choice (`rlvr.rollout.tokens.render`):
the chat template's own tool block when it has one, else `describe_tools` in the system message.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any, Protocol

import bm25s
import numpy as np

from rlvr.envs.encyclopedia import DOCUMENTS
from rlvr.rewards.sandbox import Limits, Sandbox

# An unclosed tag at the very end still counts: engines that stop on "</tool_call>" drop it.
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
CALL_FORMAT = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
# Llama 3.1's JSON tool calling (custom tools): the reply is the call; <|python_tag|> may lead it.
JSON_CALL_FORMAT = '{"name": ..., "parameters": {...}}'
PYTHON_TAG = "<|python_tag|>"


class Tool(Protocol):
    name: str
    description: str  # one line, shown to the model
    parameters: dict[str, Any]  # JSON schema of the arguments object

    def __call__(self, arguments: dict[str, Any]) -> str:
        """The result the model sees; arguments were checked against `parameters`."""
        ...


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def render(self) -> str:
        """The call as the model writes it."""
        body = json.dumps({"name": self.name, "arguments": self.arguments})
        return f"<tool_call>{body}</tool_call>"


class ToolCallError(ValueError):
    """A call that cannot run (malformed JSON, unknown tool, bad arguments); the message says why."""


def find_tool_calls(text: str) -> list[str]:
    """The raw body of every `<tool_call>` in `text`, in order; text around the tags is ignored."""
    return [m.group(1) for m in _TOOL_CALL.finditer(text)]


def find_json_call(text: str) -> str | None:
    """The body of a Llama 3.1-style call, or None: `text` (stripped) is one JSON object with a
    string "name" and "parameters" (or "arguments"). After <|python_tag|> (kept when the engine
    decodes special tokens) whatever follows is a call, so a malformed one gets an error back."""
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        return body[len(PYTHON_TAG) :].strip()
    if not (body.startswith("{") and body.endswith("}")):
        return None
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None  # an answer that happens to look like JSON
    is_call = isinstance(data, dict) and isinstance(data.get("name"), str)
    return body if is_call and ("parameters" in data or "arguments" in data) else None


def find_calls(text: str) -> tuple[list[str], str]:
    """(the bodies of the calls in `text`, the format they are written in): `<tool_call>` tags
    when there are any, else a Llama 3.1 JSON call; no calls means the reply is an answer."""
    bodies = find_tool_calls(text)
    if bodies:
        return bodies, CALL_FORMAT
    body = find_json_call(text)
    return ([body], JSON_CALL_FORMAT) if body is not None else ([], CALL_FORMAT)


def parse_tool_call(
    body: str, tools: Mapping[str, Tool], call_format: str = CALL_FORMAT
) -> ToolCall:
    """One call's body as a ToolCall for one of `tools`; raises ToolCallError, whose message
    shows `call_format` (the format the model wrote the call in). The arguments are under
    "arguments" (Hermes) or "parameters" (Llama 3.1)."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise ToolCallError(
            f"malformed tool call: invalid JSON ({e.msg} at character {e.pos}); write {call_format}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ToolCallError(f"malformed tool call: expected {call_format}")
    name = data["name"]
    arguments = data["arguments"] if "arguments" in data else data.get("parameters", {})
    if name not in tools:
        raise ToolCallError(f"unknown tool '{name}'; available: {', '.join(tools)}")
    if not isinstance(arguments, dict):
        raise ToolCallError(f"tool '{name}': arguments must be a JSON object")
    check_arguments(tools[name], arguments)
    return ToolCall(name, arguments)


def parse_tool_calls(text: str, tools: Mapping[str, Tool]) -> list[ToolCall]:
    """Every call in `text`; raises ToolCallError on the first one that cannot run."""
    bodies, call_format = find_calls(text)
    return [parse_tool_call(body, tools, call_format) for body in bodies]


def function_schema(tool: Tool) -> dict[str, Any]:
    """The tool as an OpenAI-style function schema, what `apply_chat_template(tools=...)` takes."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def signature(schema: Mapping[str, Any]) -> str:
    """`name(arg: type, opt?: type): description`, a compact stand-in for the JSON schema."""
    function = schema.get("function", schema)
    parameters = function.get("parameters") or {}
    required = set(parameters.get("required", []))
    args = ", ".join(
        f"{key}{'' if key in required else '?'}: {spec.get('type', 'any')}"
        for key, spec in parameters.get("properties", {}).items()
    )
    return f"{function['name']}({args}): {function.get('description', '')}"


def describe_tools(schemas: Sequence[Mapping[str, Any]]) -> str:
    """The system text that teaches the tagged call format, for chat templates that cannot
    render tools themselves; kept short for small context windows."""
    lines = [f"Call a tool by replying {CALL_FORMAT}; its result comes back. Tools:"]
    return "\n".join(lines + [signature(schema) for schema in schemas])


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def _is_json_type(value: Any, expected: str) -> bool:
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False  # JSON true is not a number, though Python's bool is an int
    return isinstance(value, _JSON_TYPES[expected])


def check_arguments(tool: Tool, arguments: dict[str, Any]) -> None:
    """The subset of JSON schema tools use: required keys, unknown keys, top-level types."""
    schema = tool.parameters
    properties = schema.get("properties", {})
    missing = [key for key in schema.get("required", []) if key not in arguments]
    if missing:
        raise ToolCallError(f"tool '{tool.name}': missing argument(s) {', '.join(missing)}")
    unknown = [key for key in arguments if key not in properties]
    if unknown and schema.get("additionalProperties", True) is False:
        raise ToolCallError(
            f"tool '{tool.name}': unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(properties)}"
        )
    for key, value in arguments.items():
        expected = properties.get(key, {}).get("type")
        if expected in _JSON_TYPES and not _is_json_type(value, expected):
            raise ToolCallError(f"tool '{tool.name}': argument '{key}' must be a {expected}")


def _one_argument(name: str, description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": description}},
        "required": [name],
        "additionalProperties": False,
    }


def truncate(text: str, limit: int) -> str:
    """At most about `limit` characters, keeping the head and the tail (where tracebacks end)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n...[{len(text) - 2 * half} characters cut]...\n{text[-half:]}"


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message is the reason."""


_CALC_CHARS = re.compile(r"[0-9.+\-*/%() \t]+")
_MAX_EXPRESSION = 200
# Results beyond this many bits (about 300 digits) are refused, which also bounds ** 's work.
_MAX_BITS = 1024


def _divide(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise CalculatorError("division by zero")
    return a / b


def _modulo(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise CalculatorError("division by zero")
    return a % b


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    if exponent.denominator == 1:
        # A lower bound on the result's bits (0 for 0, 1 and -1), checked before computing it.
        size = max(abs(base.numerator).bit_length(), base.denominator.bit_length())
        if (size - 1) * abs(exponent.numerator) > _MAX_BITS:
            raise CalculatorError("result too large")
        return base**exponent.numerator
    if base < 0:
        raise CalculatorError("fractional power of a negative number")
    try:
        return Fraction(float(base) ** float(exponent))
    except OverflowError:
        raise CalculatorError("result too large") from None


_BINARY: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _divide,
    ast.Mod: _modulo,
    ast.Pow: _power,
}


def _bounded(value: Fraction) -> Fraction:
    if max(abs(value.numerator).bit_length(), value.denominator.bit_length()) > _MAX_BITS:
        raise CalculatorError("result too large")
    return value


def _evaluate(node: ast.AST, source: str) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        # The literal's own digits, so 0.1 is exactly 1/10 rather than the nearest float.
        return _bounded(Fraction(ast.get_source_segment(source, node)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, source)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, source), _evaluate(node.right, source)
        return _bounded(_BINARY[type(node.op)](left, right))
    raise CalculatorError("only numbers, + - * / ** % and parentheses are allowed")


def calculate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression, parsed and never run; raises CalculatorError."""
    expression = expression.strip()
    if len(expression) > _MAX_EXPRESSION:
        raise CalculatorError(f"expression longer than {_MAX_EXPRESSION} characters")
    if not _CALC_CHARS.fullmatch(expression):
        raise CalculatorError("only numbers, + - * / ** % and parentheses are allowed")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError):
        raise CalculatorError("not a valid expression") from None
    return _evaluate(tree.body, expression)


def format_number(value: Fraction) -> str:
    """Integers exactly; anything else to 12 significant digits."""
    if value.denominator == 1:
        return str(value.numerator)
    quotient = Context(prec=12).divide(Decimal(value.numerator), Decimal(value.denominator))
    return format(quotient, "g")


class Calculator:
    """Exact arithmetic (+ - * / ** % and parentheses), parsed without eval."""

    name = "calculator"
    description = "Evaluate an arithmetic expression with + - * / ** % and parentheses."
    parameters = _one_argument("expression", "e.g. (3 + 4.5) * 2 ** 3")

    def __call__(self, arguments: dict[str, Any]) -> str:
        try:
            return format_number(calculate(arguments["expression"]))
        except CalculatorError as e:
            return f"error: {e}"


# Short limits: a tool call is a quick computation, not a test suite.
PYTHON_LIMITS = Limits(wall_seconds=3.0, cpu_seconds=2.0, memory_mb=512, max_output_kb=64)


class PythonTool:
    """Runs a Python program in the rlvr sandbox and returns its output (truncated)."""

    name = "python"
    description = "Run a Python program; returns what it prints to stdout and stderr."
    parameters = _one_argument("code", "a complete program; print the values you need")

    def __init__(self, limits: Limits = PYTHON_LIMITS, max_chars: int = 1000):
        # Building the sandbox checks its isolation: SandboxUnavailableError here, not mid-run.
        self.sandbox = Sandbox(limits, workers=1)
        self.max_chars = max_chars

    def __call__(self, arguments: dict[str, Any]) -> str:
        result = self.sandbox.run_python(arguments["code"])
        if result.error:
            raise RuntimeError(f"the sandbox failed: {result.error}")  # not the model's doing
        parts = [result.stdout.rstrip("\n")] if result.stdout else []
        if result.stderr:
            parts.append("stderr:\n" + result.stderr.rstrip("\n"))
        if result.timed_out:
            parts.append(f"timed out (limit {self.sandbox.limits.wall_seconds:g}s wall, "
                         f"{self.sandbox.limits.cpu_seconds:g}s CPU)")  # fmt: skip
        elif result.output_limited:
            parts.append("stopped: too much output")
        elif result.returncode != 0:
            parts.append(f"exit code {result.returncode}")
        return truncate("\n".join(parts), self.max_chars) or "(no output)"


def snippet(text: str, limit: int) -> str:
    """`text` cut at a word boundary to at most `limit` characters (plus '...')."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + "..."


def _tokenize(texts: list[str]) -> Any:
    return bm25s.tokenize(texts, stopwords="en", show_progress=False, return_ids=False)


class Search:
    """BM25 search (bm25s) over titled documents, by default the bundled encyclopedia."""

    name = "search"
    description = "Search the encyclopedia by keywords; returns matching titles and snippets."
    parameters = _one_argument("query", "keywords, e.g. a name")

    def __init__(
        self, documents: Mapping[str, str] = DOCUMENTS, top_k: int = 3, snippet_chars: int = 80
    ):
        """`documents` maps title -> text; titles are indexed with their text."""
        self.documents = dict(documents)
        self.titles = list(self.documents)
        self.top_k, self.snippet_chars = top_k, snippet_chars
        self.retriever = bm25s.BM25()
        corpus = _tokenize([f"{title} {text}" for title, text in self.documents.items()])
        self.retriever.index(corpus, show_progress=False)

    def rank(self, query: str) -> list[str]:
        """Titles of the best `top_k` documents sharing a term with `query`, best first."""
        terms = _tokenize([query])[0]
        if not terms:
            return []
        scores = self.retriever.get_scores(terms)
        order = np.argsort(-scores, kind="stable")[: self.top_k]  # ties keep collection order
        return [self.titles[i] for i in order if scores[i] > 0]

    def __call__(self, arguments: dict[str, Any]) -> str:
        hits = self.rank(arguments["query"])
        if not hits:
            return "no results"
        return "\n".join(f"{t}: {snippet(self.documents[t], self.snippet_chars)}" for t in hits)


# name -> factory with working defaults, so configs can name tools.
TOOLS: dict[str, Callable[[], Tool]] = {
    "calculator": Calculator,
    "python": PythonTool,
    "search": Search,
}
