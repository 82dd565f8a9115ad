"""Assert tests split so that what they expect never enters the sandbox: the sandbox evaluates
the calls into the solution (probes); their values are compared here, without `eval`."""

from __future__ import annotations

import ast
import json
import math
import operator
from dataclasses import dataclass
from typing import Any

MAX_VALUE_CHARS = 1 << 20  # one encoded probe value
MAX_DEPTH = 64
MAX_SIZE = 10**7  # elements or characters a trusted-side operation may build
MAX_EXPONENT = 10_000

# Built-ins the trusted side evaluates itself: they compute on values, they decide nothing the
# solution could influence beyond the values it returned.
_TYPES = {t.__name__: t for t in (int, float, complex, str, bytes, bool, list, tuple, set, dict)}
_TYPES["frozenset"] = frozenset
_FUNCTIONS = {
    f.__name__: f
    for f in (abs, len, sorted, min, max, sum, all, any, reversed, isinstance, type, divmod, round)
}
_FUNCTIONS["range"] = range
_MATH = {
    name: getattr(math, name)
    for name in (
        "isclose", "sqrt", "fabs", "floor", "ceil", "isnan", "isinf", "isfinite", "log", "exp",
        "pi", "e", "inf", "nan", "tau",
    )
}  # fmt: skip
_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}  # fmt: skip
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
          ast.Invert: operator.invert}  # fmt: skip
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}  # fmt: skip
# Probes may reach into what a call returned; anything else around a call stays here.
_ACCESS = (ast.Call, ast.Attribute, ast.Subscript, ast.Name)


class NotSplittable(Exception):
    """This test cannot be split into probes and a trusted comparison."""


class ProbeFailed(Exception):
    """A probe raised in the sandbox, returned a value that is not plain data, or is missing."""


@dataclass(frozen=True)
class SplitTest:
    """`setup`: import statements run in the sandbox before the probes (they carry no expected
    values); `probes`: expression sources the sandbox evaluates; `asserts`: the test's asserts,
    each a template in which `__rlvr_probe__[i]` stands for the value of probe i."""

    setup: tuple[str, ...]
    probes: tuple[str, ...]
    asserts: tuple[ast.expr, ...]


def split_test(source: str, shadowed: frozenset[str] = frozenset()) -> SplitTest | None:
    """The test as probes plus trusted templates, or None when it must run whole (weak path):
    setup statements, helpers, or a comparison that would have to run in the sandbox.

    `assert abs(f(2) - 0.5) < 1e-9` becomes the probe `f(2)` and the template
    `abs(<probe 0> - 0.5) < 1e-9`. Built-ins in `shadowed` (names the solution defines, as in
    "write max(a, b)") are the solution's, so calls to them are probes too."""
    try:
        tree = ast.parse(source)
        statements = _inline_check(tree.body)
        setup, math_names = [], {}
        for statement in statements:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                math_names.update(_math_import(statement))
                setup.append(ast.unparse(statement))
        asserts = [s for s in statements if isinstance(s, ast.Assert)]
        if not asserts or len(asserts) + len(setup) != len(statements):
            return None
        splitter = _Splitter(math_names, shadowed)
        templates = tuple(splitter.template(a.test) for a in asserts)
    except (SyntaxError, ValueError, NotSplittable):
        return None
    return SplitTest(tuple(setup), tuple(splitter.probes), templates)


def names(source: str) -> tuple[set[str], set[str]]:
    """(names the code binds anywhere, names it reads): what ties one test to another."""
    bound, read = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return bound, read


def _inline_check(body: list[ast.stmt]) -> list[ast.stmt]:
    """HumanEval's `def check(candidate): <asserts>` then `check(f)`: the asserts, with the
    parameter renamed to the argument, so the common dataset form splits too."""
    if not (
        len(body) == 2
        and isinstance(body[0], ast.FunctionDef)
        and isinstance(body[1], ast.Expr)
        and isinstance(call := body[1].value, ast.Call)
        and getattr(call.func, "id", None) == body[0].name
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Name)
        and not call.keywords
        and len(body[0].args.args) == 1
        and not body[0].decorator_list
    ):
        return body
    parameter, argument = body[0].args.args[0].arg, call.args[0].id

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            return ast.Name(argument, node.ctx) if node.id == parameter else node

    statements = [s for s in body[0].body if not _is_docstring(s)]
    return [ast.fix_missing_locations(Rename().visit(s)) for s in statements]


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _math_import(statement: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """Names a `math` import binds (name -> attribute, "" for the module); other imports would
    bring code the trusted side does not evaluate, so the test is not split."""
    if isinstance(statement, ast.Import):
        if any(a.name != "math" for a in statement.names):
            raise NotSplittable
        return {a.asname or "math": "" for a in statement.names}
    if statement.module != "math" or statement.level or any(a.name == "*" for a in statement.names):
        raise NotSplittable
    if any(a.name not in _MATH for a in statement.names):
        raise NotSplittable
    return {a.asname or a.name: a.name for a in statement.names}


class _Splitter:
    """Walks an assert's test: operators, literals and safe built-ins stay (the template); the
    outermost access chains around calls into the solution become probes."""

    def __init__(self, math_names: dict[str, str], shadowed: frozenset[str]):
        self.math_names = math_names
        self.shadowed = shadowed
        self.probes: list[str] = []

    def template(self, node: ast.expr) -> ast.expr:
        return ast.fix_missing_locations(self._visit(node))

    def _visit(self, node: ast.expr) -> ast.expr:
        trusted = self._trusted(node)
        if trusted is not None:
            return trusted
        if isinstance(node, ast.Call) and (function := self._trusted(node.func)) is not None:
            if any(isinstance(a, ast.Starred) for a in node.args):
                raise NotSplittable
            if any(k.arg is None for k in node.keywords):
                raise NotSplittable
            args = [self._visit(a) for a in node.args]
            keywords = [ast.keyword(k.arg, self._visit(k.value)) for k in node.keywords]
            return ast.Call(function, args, keywords)
        if isinstance(node, _ACCESS) or (
            isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))
        ):
            return self._probe(node)
        if isinstance(node, ast.Constant):
            return node
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                raise NotSplittable
            return type(node)([self._visit(e) for e in node.elts], *_ctx(node))
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise NotSplittable
            return ast.Dict(
                [self._visit(k) for k in node.keys], [self._visit(v) for v in node.values]
            )
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return ast.BinOp(self._visit(node.left), node.op, self._visit(node.right))
        if isinstance(node, ast.UnaryOp):
            return ast.UnaryOp(node.op, self._visit(node.operand))
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(node.op, [self._visit(v) for v in node.values])
        if isinstance(node, ast.Compare):
            return ast.Compare(
                self._visit(node.left), node.ops, [self._visit(c) for c in node.comparators]
            )
        if isinstance(node, ast.IfExp):
            return ast.IfExp(
                self._visit(node.test), self._visit(node.body), self._visit(node.orelse)
            )
        raise NotSplittable

    def _probe(self, node: ast.expr) -> ast.expr:
        # A comparison inside the part sent to the sandbox would be a verdict made there.
        if any(isinstance(n, (ast.Compare, ast.Lambda, ast.NamedExpr)) for n in ast.walk(node)):
            raise NotSplittable
        self.probes.append(ast.unparse(node))
        index = ast.Constant(len(self.probes) - 1)
        return ast.Subscript(ast.Name("__rlvr_probe__", ast.Load()), index, ast.Load())

    def _trusted(self, node: ast.expr) -> ast.expr | None:
        """The canonical node (a built-in's name, or `math.<name>`) when `node` names something
        the trusted side evaluates itself, else None."""
        if isinstance(node, ast.Name) and node.id not in self.shadowed:
            if node.id in _TYPES or node.id in _FUNCTIONS:
                return node
            if self.math_names.get(node.id):  # from math import isclose [as ...]
                return _math(self.math_names[node.id])
        is_math_module = (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and self.math_names.get(node.value.id) == ""
        )
        if is_math_module and node.attr in _MATH:
            return _math(node.attr)
        return None


def _math(name: str) -> ast.Attribute:
    return ast.Attribute(ast.Name("math", ast.Load()), name, ast.Load())


def _ctx(node: ast.expr) -> tuple:
    return () if isinstance(node, ast.Set) else (ast.Load(),)


# ---------------------------------------------------------------------------------------------
# The trusted side: decoding probe values and evaluating templates


def decode(text: str) -> Any:
    """A value the harness encoded (see code_harness.encode): tagged JSON of plain built-ins
    only. Anything else, too deep or too large, raises ProbeFailed."""
    if len(text) > MAX_VALUE_CHARS:
        raise ProbeFailed("value too large")
    try:
        return _decode(json.loads(text), 0)
    except (ValueError, TypeError, KeyError, RecursionError) as e:
        raise ProbeFailed(f"not a plain value: {e}") from None


def _decode(item: Any, depth: int) -> Any:
    if depth > MAX_DEPTH or not isinstance(item, list) or not item or type(item[0]) is not str:
        raise ValueError("malformed")
    tag, *rest = item
    if tag == "none" and not rest:
        return None
    (payload,) = rest
    scalars = {"bool": bool, "int": int, "str": str}
    if tag in scalars:
        if type(payload) is not scalars[tag]:
            raise ValueError(f"{tag} payload {payload!r}")
        return payload
    if tag == "float" and type(payload) is str:
        return float(payload)  # repr text, so nan and inf travel; float() parses numbers only
    if tag == "complex" and type(payload) is list and len(payload) == 2:
        return complex(float(payload[0]), float(payload[1]))
    if tag == "bytes" and type(payload) is str:
        return bytes.fromhex(payload)
    if type(payload) is not list:
        raise ValueError(f"{tag} payload")
    if tag in ("list", "tuple", "set", "frozenset"):
        kind = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag]
        return kind(_decode(v, depth + 1) for v in payload)
    if tag == "dict":
        return {_decode(k, depth + 1): _decode(v, depth + 1) for k, v in map(_pair, payload)}
    raise ValueError(f"unknown tag {tag!r}")


def _pair(item: Any) -> tuple[Any, Any]:
    if type(item) is not list or len(item) != 2:
        raise ValueError("dict item")
    return item[0], item[1]


class Missing:
    """A probe that raised, returned no plain value, or never reported: reading it fails the
    assert, as the raise would have in Python."""

    def __init__(self, reason: str):
        self.reason = reason


def passes(split: SplitTest, values: list[Any]) -> bool:
    """Every assert of the test holds for these probe values (a Missing raises when read)."""
    try:
        return all(_truth(Evaluator(values).eval(t)) for t in split.asserts)
    except Exception:  # noqa: BLE001 - an assert that raises fails its test, as in Python
        return False


def _truth(value: Any) -> bool:
    return bool(value)  # values are plain built-ins, whose truth means what it says


class Evaluator:
    """Evaluates a template over plain values; sizes are bounded so that values the solution
    returned cannot make this side hang or exhaust memory."""

    def __init__(self, values: list[Any]):
        self.values = values

    def eval(self, node: ast.expr) -> Any:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise TypeError(f"{type(node).__name__} is not evaluated here")
        return method(node)

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Subscript(self, node: ast.Subscript) -> Any:
        if isinstance(node.value, ast.Name) and node.value.id == "__rlvr_probe__":
            value = self.values[node.slice.value]
            if isinstance(value, Missing):
                raise ProbeFailed(value.reason)
            return value
        raise TypeError("subscripts are probes")

    def _Name(self, node: ast.Name) -> Any:
        return _TYPES[node.id] if node.id in _TYPES else _FUNCTIONS[node.id]

    def _Attribute(self, node: ast.Attribute) -> Any:
        return _MATH[node.attr]  # the splitter leaves only math.<name> attributes here

    def _List(self, node: ast.List) -> list:
        return [self.eval(e) for e in node.elts]

    def _Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.eval(e) for e in node.elts)

    def _Set(self, node: ast.Set) -> set:
        return {self.eval(e) for e in node.elts}

    def _Dict(self, node: ast.Dict) -> dict:
        return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values)}

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        return _UNARY[type(node.op)](self.eval(node.operand))

    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.eval(node.left), self.eval(node.right)
        _check_size(node.op, left, right)
        return _BINARY[type(node.op)](left, right)

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        value = None
        for operand in node.values:
            value = self.eval(operand)
            if _truth(value) == isinstance(node.op, ast.Or):
                return value
        return value

    def _Compare(self, node: ast.Compare) -> bool:
        left = self.eval(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.eval(comparator)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp) -> Any:
        return self.eval(node.body) if _truth(self.eval(node.test)) else self.eval(node.orelse)

    def _Call(self, node: ast.Call) -> Any:
        function = self.eval(node.func)
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords}
        if function is range and len(range(*args)) > MAX_SIZE:
            raise ValueError("range too long")
        if function is round and len(args) > 1 and not -1000 <= args[1] <= 1000:
            raise ValueError("round: ndigits out of bounds")
        return function(*args, **kwargs)


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse results that would be huge: repeated sequences, powers and shifts."""
    if isinstance(op, ast.Mult):
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(count, int):
                if len(seq) * count > MAX_SIZE:
                    raise ValueError("sequence too long")
    if isinstance(op, ast.Pow) and isinstance(right, int) and abs(right) > MAX_EXPONENT:
        if isinstance(left, int) and left not in (0, 1, -1):
            raise ValueError("exponent too large")
    if isinstance(op, ast.LShift) and isinstance(right, int) and right > MAX_EXPONENT * 8:
        raise ValueError("shift too large")
