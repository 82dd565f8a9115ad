"""Code correctness: the share of a problem's tests the model's program passes, in the sandbox.
Assert tests are split so that their expected values stay here (rlvr.rewards.code_tests)."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from pydantic import Field

from rlvr.rewards.code_tests import (
    Missing,
    ProbeFailed,
    SplitTest,
    decode,
    names,
    passes,
    split_test,
)
from rlvr.rewards.sandbox import Execution, SandboxSettings
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


def _sort_asserts(asserts: list[str], code: str) -> tuple[dict[int, SplitTest], dict[int, str]]:
    """Split tests and weak tests by index; a test that is not valid code is neither (it fails
    without running, as it would for any solution). A split test that shares a name with a weak
    one (`s = Stack()` in one test, `assert s.pop() == 1` in the next) is weak too: the two kinds
    run in different executions."""
    try:
        defined, _ = names(code)
    except (SyntaxError, ValueError):
        defined = set()
    split, weak = {}, {}
    for index, source in enumerate(asserts):
        try:
            compile(source, f"test_{index}", "exec")
        except (SyntaxError, ValueError):
            continue
        if (test := split_test(source, frozenset(defined))) is not None:
            split[index] = test
        else:
            weak[index] = source
    tied = True
    while tied and weak:
        weak_names = [names(source) for source in weak.values()]
        weak_bound = set().union(*(bound for bound, _ in weak_names))
        weak_read = set().union(*(read for _, read in weak_names))
        tied = [i for i, t in split.items() if _ties(t, weak_bound, weak_read)]
        weak.update((i, asserts[i]) for i in tied)
        split = {i: t for i, t in split.items() if i not in tied}
    return split, dict(sorted(weak.items()))


def _ties(test: SplitTest, weak_bound: set[str], weak_read: set[str]) -> bool:
    """The split test reads a name a weak test binds, or binds (imports) one a weak test reads."""
    read = set().union(*(names(probe)[1] for probe in test.probes))
    bound = set().union(*(names(statement)[0] for statement in test.setup))
    return bool(read & weak_bound or bound & weak_read)


def _probe_values(stdout: str, secret: str, split: dict[int, SplitTest]) -> dict[int, list]:
    """Each split test's probe values from the harness's records. A probe reported twice (the
    solution printing records of its own) or not at all is Missing, and fails its test."""
    reports: dict[tuple[int, int], list[str]] = {}
    for line in stdout.splitlines():
        parts = line.split(" ", 4)
        if len(parts) >= 4 and parts[0] == secret and parts[1].isdigit() and parts[2].isdigit():
            reports.setdefault((int(parts[1]), int(parts[2])), []).append(" ".join(parts[3:]))
    values = {}
    for index, test in split.items():
        values[index] = [_value(reports.get((index, n), [])) for n in range(len(test.probes))]
    return values


def _value(reports: list[str]):
    if len(reports) != 1:
        return Missing(f"{len(reports)} reports")
    kind, _, payload = reports[0].partition(" ")
    if kind != "value":
        return Missing("the probe raised or returned a value that is not plain data")
    try:
        return decode(payload)
    except ProbeFailed as e:
        return Missing(str(e))


class CodeTests:
    """Share of the problem's tests (metadata["tests"]) the program passes, run in the sandbox.

    {"input", "output"} pairs run the program on stdin and compare stdout here. Assert tests are
    split: the sandbox evaluates the calls into the solution and returns their values as plain
    data, and the asserts are evaluated here, so what a test expects never enters the sandbox.
    Tests that cannot be split (setup statements, helpers) run whole in the sandbox in a
    separate execution, recorded with a per-run secret; they are weaker (a solution that reads
    its own memory can forge them) and counted in info["weak_tests"]. Building one checks the
    sandbox's isolation, so a run without it refuses to start."""

    class Params(SandboxSettings):
        all_or_nothing: bool = Field(
            False, description="Score 1 only when every test passes, else 0 (no partial credit)."
        )

    def __init__(self, params: Params | None = None):
        self.params = params or self.Params()
        self.sandbox = self.params.open("code")

    def __call__(self, problem: Problem, response: str) -> Score:
        stdio, asserts = _validate(problem)
        code = extract_code(response)
        if code is None:
            return Score(0.0, "wrong", {"reason": "no code block"})
        split, weak = _sort_asserts(asserts, code)
        secret = secrets.token_hex(16)
        submit, run = self.sandbox.submit, self.sandbox.run
        # Split and weak tests never share an execution: a weak test's expected values in memory
        # would tell the solution what the split tests expect.
        split_run = (
            submit(run, _harness_files(code, split=split), ["python", "harness.py"], secret)
            if split
            else None
        )
        weak_run = (
            submit(run, _harness_files(code, weak=weak), ["python", "harness.py"], secret)
            if weak
            else None
        )
        stdio_runs = [
            submit(run, {"main.py": code}, ["python", "main.py"], t["input"]) for t in stdio
        ]
        passed = 0
        executions: list[Execution] = []
        if split_run is not None:
            execution = split_run.result()
            executions.append(execution)
            values = _probe_values(execution.stdout, secret, split)
            passed += sum(passes(test, values[index]) for index, test in split.items())
        if weak_run is not None:
            execution = weak_run.result()
            executions.append(execution)
            records = {line for line in execution.stdout.splitlines() if line.startswith(secret)}
            passed += sum(f"{secret} {i} pass" in records for i in weak)
        for future, test in zip(stdio_runs, stdio):
            execution = future.result()
            executions.append(execution)
            passed += execution.ok and same_output(execution.stdout, test["output"])
        info = {"passed": passed, "total": len(stdio) + len(asserts), "weak_tests": len(weak)}
        return self._score(info, executions)

    def _score(self, info: dict, executions: list[Execution]) -> Score:
        passed, total = info["passed"], info["total"]
        errors = [e.error for e in executions if e.error]
        if errors:
            return Score(0.0, "infra_error", {**info, "error": errors[0]})
        fraction = passed / total
        value = float(passed == total) if self.params.all_or_nothing else fraction
        if passed == total:
            return Score(value, "ok", info)
        status = "timeout" if any(e.timed_out for e in executions) else "wrong"
        return Score(value, status, info)


def _harness_files(
    code: str, split: dict[int, SplitTest] | None = None, weak: dict[int, str] | None = None
) -> dict[str, str]:
    tests = {
        "split": [[i, list(t.setup), list(t.probes)] for i, t in (split or {}).items()],
        "weak": [[i, source] for i, source in (weak or {}).items()],
    }
    return {"solution.py": code, "tests.json": json.dumps(tests), "harness.py": HARNESS}
