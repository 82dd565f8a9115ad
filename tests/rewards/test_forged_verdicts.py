"""Forged verdicts: solutions that read the harness's secret out of memory and print pass lines
and probe records. Split assert tests keep what they expect outside the sandbox, so even an
attack that really finds the secret scores 0; the attacks are checked to have done so."""

from __future__ import annotations

import textwrap

import pytest

from rlvr.rewards.code import CodeTests
from rlvr.rewards.sandbox import Execution, Limits, SandboxUnavailableError
from rlvr.types import Problem, Score

LIMITS = Limits(wall_seconds=10, cpu_seconds=8)
# Distinctive expected values: none of them may appear in what the sandbox is given.
EXPECTED = ("7340033", "-9100417")
SPLIT = Problem(
    id="add",
    prompt="Write add(a, b).",
    metadata={
        "tests": [
            "assert add(7340032, 1) == 7340033",
            "assert abs(add(-9100400, -17) - -9100417) < 1e-9",
            "def check(candidate):\n    assert candidate(7340030, 3) == 7340033\n\ncheck(add)",
        ]
    },
)
WEAK = Problem(
    id="add-weak",
    prompt="Write add(a, b).",
    metadata={"tests": ["x = add(7340032, 1)\nassert x == 7340033"]},
)

# Prints forged records for every secret-looking string it finds: pass lines for weak tests
# and probe records (guessing the value 3) for split ones.
FORGE = """
import os, re
def forge(found):
    for secret in set(found):
        for test in range(5):
            os.write(1, f"{secret} {test} pass\\n".encode())
            for probe in range(3):
                os.write(1, f'{secret} {test} {probe} value ["int", 3]\\n'.encode())
HEX32 = rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])"
"""

ATTACKS = {
    # A child interpreter started by a spawning call that raises no audit event; it reads the
    # harness's memory through /proc/<ppid>/mem and forges.
    "fork-exec-proc-mem": """
        import _posixsubprocess, sys
        CHILD = FORGE_SOURCE + '''
        import sys
        sys.stderr.write("child started\\\\n")
        found, ppid = [], os.getppid()
        try:
            mem = os.open(f"/proc/{ppid}/mem", os.O_RDONLY)
            for line in open(f"/proc/{ppid}/maps"):
                span, perms = line.split()[:2]
                lo, hi = (int(x, 16) for x in span.split("-"))
                if perms.startswith("rw") and hi - lo < 1 << 26:
                    try:
                        os.lseek(mem, lo, os.SEEK_SET)
                        found += re.findall(HEX32, os.read(mem, hi - lo))
                    except OSError:
                        pass
        except OSError as e:
            sys.stderr.write(f"no /proc: {e}\\\\n")
        forge(s.decode() for s in found)
        '''
        def add(a, b):
            r, w = os.pipe()
            args = [sys.executable, "-S", "-c", CHILD]
            _posixsubprocess.fork_exec(
                args, [sys.executable.encode()], True, (), None, None,
                -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1,
                None, False,
            )
            os.close(w)
            os.read(r, 100)
            os.wait()
            return 3
    """,
    # The solution reads its own process's memory through numpy (no ctypes, no /proc): an array
    # over any address, handed to os.write so that unmapped pages fail with EFAULT, not a crash.
    "numpy-own-memory": """
        import sys
        import numpy as np
        class At:
            def __init__(self, address, size):
                self.__array_interface__ = {
                    "data": (address, True), "shape": (size,), "typestr": "|u1", "version": 3
                }
        def scan():
            r, w = os.pipe()
            os.set_blocking(w, False)
            found, chunk = set(), 1 << 16
            for anchor in {id(scan), id("x" * 40)}:
                for k in range(-256, 256):
                    try:
                        n = os.write(w, np.asarray(At((anchor & ~(chunk - 1)) + k * chunk, chunk)))
                    except OSError:
                        continue
                    found |= set(re.findall(HEX32, os.read(r, n)))
            return [s.decode() for s in found]
        FOUND = []
        def add(a, b):
            if not FOUND:
                FOUND.extend(scan())
                forge(FOUND)
            return 3
    """,
    # HumanEval-style tolerance tests compare with <: an object that returns itself from
    # arithmetic and compares true to anything.
    "arithmetic-absorber": """
        class Absorb:
            def __sub__(self, other): return self
            __rsub__ = __add__ = __radd__ = __abs__ = __neg__ = __sub__
            def __abs__(self): return self
            def __eq__(self, other): return True
            def __lt__(self, other): return True
            __le__ = __gt__ = __ge__ = __lt__
            __hash__ = object.__hash__
        def add(a, b):
            return Absorb()
    """,
}
ATTACKS = {
    name: FORGE + textwrap.dedent(code).replace("FORGE_SOURCE", repr(FORGE))
    for name, code in ATTACKS.items()
}


@pytest.fixture(scope="module")
def reward(skip_without_namespaces):
    try:
        code_tests = CodeTests(CodeTests.Params(limits=LIMITS, packages=["numpy"]))
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    yield code_tests
    code_tests.sandbox.close()


def scored(reward: CodeTests, problem: Problem, code: str) -> tuple[Score, list[tuple]]:
    """The score and each execution's (files, stdin, result), recorded on the real sandbox."""
    runs, plain_run = [], reward.sandbox.run

    def recorded_run(files, argv, stdin="", limits=None) -> Execution:
        execution = plain_run(files, argv, stdin, limits)
        runs.append((files, stdin, execution))
        return execution

    reward.sandbox.run = recorded_run
    try:
        return reward(problem, code), runs
    finally:
        reward.sandbox.run = plain_run


def test_an_honest_solution_passes_both_paths(reward):
    honest = FORGE + "def add(a, b):\n    return a + b\n"
    assert scored(reward, SPLIT, honest)[0] == Score(
        1.0, "ok", {"passed": 3, "total": 3, "weak_tests": 0}
    )
    assert scored(reward, WEAK, honest)[0] == Score(
        1.0, "ok", {"passed": 1, "total": 1, "weak_tests": 1}
    )


def test_what_split_tests_expect_never_enters_the_sandbox(reward):
    _, runs = scored(reward, SPLIT, "def add(a, b):\n    return a + b\n")
    assert len(runs) == 1
    files, stdin, _ = runs[0]
    given = "".join(files.values()) + stdin
    assert "add(7340032, 1)" in given  # the inputs are there
    assert not any(value in given for value in EXPECTED)


@pytest.mark.parametrize("name", ATTACKS)
def test_a_forged_verdict_scores_zero(reward, name):
    score, runs = scored(reward, SPLIT, ATTACKS[name])
    assert score.value == 0.0 and score.info["passed"] == 0, score
    ((files, secret, execution),) = runs
    if name == "numpy-own-memory":  # the attack is real: it found the secret, and forged
        assert f"{secret.strip()} 0 0 value" in execution.stdout
    if name == "fork-exec-proc-mem":  # the child ran, with no audit hook; /proc is not there
        assert "child started" in execution.stderr and "no /proc" in execution.stderr


@pytest.mark.parametrize("name", ["fork-exec-proc-mem", "arithmetic-absorber"])
def test_the_weak_path_holds_against_what_it_can(reward, name):
    score, _ = scored(reward, WEAK, ATTACKS[name])
    assert score.value == 0.0 and score.info == {"passed": 0, "total": 1, "weak_tests": 1}
