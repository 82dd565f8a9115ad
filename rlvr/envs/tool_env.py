"""ToolEnv: any Env made tool-using. Replies with tool calls get the tools' results back as tool
messages; the first reply without one is the final answer, handed to the wrapped env."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from rlvr.envs.base import Env
from rlvr.envs.tools import (
    Tool,
    ToolCallError,
    describe_tools,
    find_calls,
    function_schema,
    parse_tool_call,
)
from rlvr.types import Message, Problem, StepResult


def describe(tools: Sequence[Tool]) -> str:
    """The system text that teaches the tagged call format (see `describe_tools`)."""
    return describe_tools([function_schema(tool) for tool in tools])


def call_with_timeout(tool: Tool, arguments: dict[str, Any], timeout: float) -> tuple[str, bool]:
    """(result text, failed). A tool that raises or outlives `timeout` gives an error text; a
    hung one is left running on its daemon thread, since Python threads cannot be killed."""
    outcome: dict[str, str] = {}

    def run() -> None:
        try:
            outcome["result"] = str(tool(arguments))
        except Exception as e:
            outcome["error"] = f"{type(e).__name__}: {e}"

    thread = threading.Thread(target=run, name=f"tool-{tool.name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return f"error: tool '{tool.name}' timed out after {timeout:g}s", True
    if "error" in outcome:
        return f"error: tool '{tool.name}' failed ({outcome['error']})", True
    return outcome["result"], False


class ToolEnv:
    """Any env with tools: calls get results back, the first reply without one is the answer.

    The tools are `tool_schemas` (OpenAI-style function schemas); `reset` returns the inner
    env's messages unchanged. Whoever renders the episode passes `tool_schemas` to the token
    layer (`Conversation(..., tools=env.tool_schemas)`), which shows them with the chat
    template's own tool block where it has one (Qwen2.5, Llama 3.1) and otherwise as a
    description of the `<tool_call>` format first in the system message (`describe`).

    A reply with `<tool_call>`s, or that is a Llama 3.1 JSON call
    (`{"name": ..., "parameters": {...}}`, optionally after <|python_tag|>), runs each call and
    observes one {"role": "tool"} message per call (a list when there are several), reward 0,
    not done, info {"tool_calls", "tool_errors"}. "tool" is the role both families' templates
    take for results (Llama 3.1's renders it as its `ipython` turn). A reply without calls goes
    to `inner.step` and is scored there.

    Every call counts against `max_tool_calls`, failed ones included; past it a call is not run
    and its result says the budget is spent and to answer, so the episode goes on (a model that
    keeps calling ends at the runner's max_turns). `tool_errors` counts calls that produced no
    result: malformed, unknown tool, bad arguments, over budget, raised, or past
    `timeout_seconds`. A tool's own error text (a traceback, "division by zero") is a result.
    """

    def __init__(
        self,
        inner: Env,
        tools: Sequence[Tool],
        max_tool_calls: int = 4,
        timeout_seconds: float = 10.0,
    ):
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")
        self.inner, self.tools = inner, {tool.name: tool for tool in tools}
        self.max_tool_calls, self.timeout_seconds = max_tool_calls, timeout_seconds
        self.tool_schemas = [function_schema(tool) for tool in tools]
        self.calls = 0

    def reset(self, problem: Problem) -> list[Message]:
        self.calls = 0
        return self.inner.reset(problem)

    def step(self, action_text: str) -> StepResult:
        bodies, call_format = find_calls(action_text)
        if not bodies:
            return self.inner.step(action_text)
        results = [self._run(body, call_format) for body in bodies]
        messages = [{"role": "tool", "content": text} for text, _ in results]
        info = {"tool_calls": len(results), "tool_errors": sum(failed for _, failed in results)}
        return StepResult(messages[0] if len(messages) == 1 else messages, 0.0, False, info)

    def _run(self, body: str, call_format: str) -> tuple[str, bool]:
        if self.calls >= self.max_tool_calls:
            return (
                f"error: no tool calls left (limit {self.max_tool_calls}); give your final answer",
                True,
            )
        self.calls += 1
        try:
            call = parse_tool_call(body, self.tools, call_format)
        except ToolCallError as e:
            return f"error: {e}", True
        return call_with_timeout(self.tools[call.name], call.arguments, self.timeout_seconds)
