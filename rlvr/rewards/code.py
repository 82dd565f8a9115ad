"""Code correctness: the share of a problem's tests the model's program passes, in the sandbox."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlvr.rewards.sandbox import Execution, Limits, Sandbox
from rlvr.types import Problem, Score

HARNESS = Path(__file__).with_name("code_harness.py").read_text()
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(response: str) -> str | None:
    """The last fenced code block (an unclosed one counts: generation may stop mid-block), else
    the whole response when it has no fence at all."""
    blocks = [b for b in _FENCE.findall(response) if b.strip()]
    if blocks:
        return blocks[-1]
    if "```" in response or not response.strip():
        return None
    return response


def _normalized(text: str) -> str:
    # strip("\n"), not strip(): leading spaces on the first line are part of the output.
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def same_output(actual: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and blank lines at either end."""
    return _normalized(actual) == _normalized(expected)


def _validate(problem: Problem) -> tuple[list[dict], list[str]]:
    tests = problem.metadata.get("tests")
    if not isinstance(tests, list) or not tests:
        raise ValueError(
            f"problem {problem.id}: the code reward needs metadata['tests'], a non-empty list of "
            '{"input": ..., "output": ...} pairs and/or assert-statement strings'
        )
    stdio, asserts = [], []
    for i, test in enumerate(tests):
        if isinstance(test, str):
            asserts.append(test)
        elif isinstance(test, dict) and isinstance(test.get("output"), str):
            stdio.append({"input": str(test.get("input", "")), "output": test["output"]})
        else:
            raise ValueError(
                f"problem {problem.id}: test {i} is {test!r}; expected an assert string or "
                '{"input": str, "output": str}'
            )
    return stdio, asserts


class CodeTests:
    """Share of the problem's tests (metadata["tests"]) the program passes, run in the sandbox.

    {"input", "output"} pairs run the program on stdin and compare stdout; strings are assert
    tests run by a harness that records each pass with a per-run secret. Building one checks the
    sandbox's isolation, so a run without it refuses to start."""

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")

        all_or_nothing: bool = Field(
            False, description="Score 1 only when every test passes, else 0 (no partial credit)."
        )
        limits: Limits = Field(default_factory=Limits, description="Sandbox limits per execution.")
        workers: int = Field(16, gt=0, description="Sandbox executions run in parallel.")

    def __init__(self, params: Params | None = None):
        self.params = params or self.Params()
        self.sandbox = Sandbox(self.params.limits, self.params.workers)

    def __call__(self, problem: Problem, response: str) -> Score:
        stdio, asserts = _validate(problem)
        code = extract_code(response)
        if code is None:
            return Score(0.0, "wrong", {"reason": "no code block"})
        run = self.sandbox.run
        stdio_runs = [
            self.sandbox.submit(run, {"main.py": code}, ["python", "main.py"], t["input"])
            for t in stdio
        ]
        passed = 0
        executions: list[Execution] = []
        if asserts:
            secret = secrets.token_hex(16)
            files = {"solution.py": code, "tests.json": json.dumps(asserts), "harness.py": HARNESS}
            execution = run(files, ["python", "harness.py"], secret)
            executions.append(execution)
            records = {line for line in execution.stdout.splitlines() if line.startswith(secret)}
            passed += sum(f"{secret} {i} pass" in records for i in range(len(asserts)))
        for future, test in zip(stdio_runs, stdio):
            execution = future.result()
            executions.append(execution)
            passed += execution.ok and same_output(execution.stdout, test["output"])
        return self._score(passed, len(stdio) + len(asserts), executions)

    def _score(self, passed: int, total: int, executions: list[Execution]) -> Score:
        info = {"passed": passed, "total": total}
        errors = [e.error for e in executions if e.error]
        if errors:
            return Score(0.0, "infra_error", {**info, "error": errors[0]})
        fraction = passed / total
        value = float(passed == total) if self.params.all_or_nothing else fraction
        if passed == total:
            return Score(value, "ok", info)
        status = "timeout" if any(e.timed_out for e in executions) else "wrong"
        return Score(value, status, info)
