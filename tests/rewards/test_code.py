"""The code reward: extracting code, comparing output, scoring tests in the sandbox, and the
assert harness against solutions that fake passing instead of passing."""

from __future__ import annotations

import ast
import json
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

import rlvr.rewards.code_harness as harness
from rlvr.rewards.code import HARNESS, CodeTests, extract_code, same_output
from rlvr.rewards.sandbox import Limits, SandboxUnavailableError
from rlvr.types import Problem, Score

# ---------------------------------------------------------------------------------------------
# extract_code and same_output


@pytest.mark.parametrize(
    ("response", "code"),
    [
        ("Here:\n```python\nprint(1)\n```\nDone.", "print(1)\n"),
        ("```py\nx = 1\n```", "x = 1\n"),
        ("```python3\nx = 3\n```", "x = 3\n"),
        ("```Python\nx = 4\n```", "x = 4\n"),  # capitalised tags are common
        ("```python  \nx = 5\n```", "x = 5\n"),  # trailing spaces after the tag
        ("```\nprint(2)\n```", "print(2)\n"),  # bare fence
        ("Sure:\n```python\nprint(3)\n", "print(3)\n"),  # unclosed: generation stopped
        ("```python\na = 1\n```\ntext\n```python\nb = 2\n```", "b = 2\n"),  # last block wins
        ("```python\na = 1\n```\nand\n```python\n```", "a = 1\n"),  # empty blocks do not count
        ("def f():\n    return 1\n", "def f():\n    return 1\n"),  # no fence: all of it
        ("", None),
        ("  \n\n", None),
        ("Here is the code:\n```python\n```\n", None),  # a fence, but nothing in it
        ("```cpp\nint main() {}\n```", None),  # another language only
    ],
    ids=[
        "python",
        "py",
        "python3",
        "Python",
        "tag-spaces",
        "bare",
        "unclosed",
        "last-of-several",
        "skip-empty",
        "no-fence",
        "empty",
        "blank",
        "empty-block",
        "other-language",
    ],
)
def test_extract_code(response, code):
    assert extract_code(response) == code


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ("5\n", "5", True),
        ("5   \n", "5", True),  # trailing whitespace on a line
        ("\n\n5\n\n", "5", True),  # blank lines at either end
        ("  \n5\n \t\n", "5", True),  # whitespace-only lines at the ends are blank
        ("a\r\nb\r\n", "a\nb", True),
        ("", "\n", True),
        ("1\n2", "1\n\n2", False),  # a blank line inside counts
        ("  *\n ***", "*\n ***", False),  # leading spaces are output, first line included
        ("1 2", "1  2", False),
        ("0", "", False),
        ("5", "5.0", False),
    ],
)
def test_same_output(actual, expected, same):
    assert same_output(actual, expected) is same
    assert same_output(expected, actual) is same


# ---------------------------------------------------------------------------------------------
# The harness's pieces, imported as a module


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


class LoudInt(int):
    pass


class EqualMeta(type):
    def __eq__(cls, other):
        return True

    __hash__ = type.__hash__


class PassesForInt(metaclass=EqualMeta):
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    ("value", "is_plain"),
    [
        (1, True),
        (1.5, True),
        (2j, True),
        ("s", True),
        (b"b", True),
        (True, True),
        (None, True),
        ([1, (2, frozenset({3})), {4}], True),
        ({"a": [1, None], 2: (b"x",)}, True),
        ((), True),
        (object(), False),
        (AlwaysEqual(), False),
        (LoudInt(3), False),  # a subclass may override __eq__
        (PassesForInt(), False),  # its metaclass says its type == int
        ([1, AlwaysEqual()], False),
        ({AlwaysEqual(): 1}, False),
        ({1: AlwaysEqual()}, False),
        (bytearray(b"x"), False),
        (range(3), False),
    ],
)
def test_plain(value, is_plain):
    assert harness.plain(value) is is_plain


def test_strict_comparisons_on_plain_values():
    compare = harness.strict_compare
    assert compare(("==",), [1, {"a": (2,)}], [1, {"a": (2,)}]) is True
    assert compare(("==",), 1, 1.0) is True  # comparisons between plain values mean what they say
    assert compare(("==",), [1, 2], [2, 1]) is False
    assert compare(("!=",), 1, 2) is True
    assert compare(("!=",), "a", "a") is False
    assert compare(("<", "<="), 1, 2, 2) is True  # chains as Python chains them
    assert compare(("<", "<"), 1, 2, 2) is False
    assert compare(("in", "not in"), 1, [1], [[2]]) is True
    assert compare(("is",), None, None) is True
    assert harness.strict_truth([0]) is True
    assert harness.strict_truth(0) is False


@pytest.mark.parametrize("value", [AlwaysEqual(), LoudInt(3), PassesForInt(), [AlwaysEqual()]])
@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">=", "in", "not in", "is"])
def test_strict_comparisons_refuse_other_values(value, op):
    """Not False but an error: inside `not (a == b)` a False would turn into a pass. Every
    operator, not only ==: `abs(f(x) - y) < 1e-9` passed an object that returns itself from
    arithmetic and compares true."""
    with pytest.raises(TypeError, match="plain"):
        harness.strict_compare((op,), value, 3)
    with pytest.raises(TypeError, match="plain"):
        harness.strict_compare((op,), [3], value)
    with pytest.raises(TypeError, match="plain"):
        harness.strict_truth(value)


@pytest.mark.parametrize(
    ("source", "transformed"),
    [
        ("assert f(x) == 3", "assert __rlvr_compare__(('==',), f(x), 3)"),
        ("assert f(x) != 3", "assert __rlvr_compare__(('!=',), f(x), 3)"),
        ("assert f(x)", "assert __rlvr_truth__(f(x))"),
        ("assert f(x) == 3, 'msg'", "assert __rlvr_compare__(('==',), f(x), 3), 'msg'"),
        ("assert not f(x)", "assert not f(x)"),
        ("assert f(x) < 3", "assert __rlvr_compare__(('<',), f(x), 3)"),
        ("assert f(x) in (1, 2)", "assert __rlvr_compare__(('in',), f(x), (1, 2))"),
        ("assert a == b < c", "assert __rlvr_compare__(('==', '<'), a, b, c)"),
        (
            "assert abs(f(x) - y) < 1e-9",
            "assert __rlvr_compare__(('<',), abs(f(x) - y), 1e-09)",
        ),
        (
            "assert f(1) == 2 and f(2) != 3",
            "assert __rlvr_truth__(__rlvr_compare__(('==',), f(1), 2) and "
            "__rlvr_compare__(('!=',), f(2), 3))",
        ),
        (
            "assert all(f(i) == i for i in r)",
            "assert __rlvr_truth__(all((__rlvr_compare__(('==',), f(i), i) for i in r)))",
        ),
        ("assert not f(1) == 2", "assert not __rlvr_compare__(('==',), f(1), 2)"),
        ("x = f(1) == 2\nassert x", "x = f(1) == 2\nassert __rlvr_truth__(x)"),  # only asserts
        (
            "def check(c):\n    assert c(1) == 2",
            "def check(c):\n    assert __rlvr_compare__(('==',), c(1), 2)",
        ),
    ],
)
def test_strict_asserts(source, transformed):
    tree = harness.StrictAsserts().visit(ast.parse(source))
    assert ast.unparse(tree) == transformed


def run_test_function(source: str, namespace: dict) -> None:
    exec(harness.as_function(source, "test_0"), namespace)
    test = namespace.pop(harness.TEST)
    test(*harness.strict_checks()[1:])


def test_a_test_runs_as_module_code_with_the_checks_as_arguments():
    namespace = {"add": lambda a, b: a + b}
    run_test_function("import math\nx = add(1, 2)\nassert x == 3", namespace)
    assert namespace["x"] == 3 and namespace["math"].pi > 3  # top-level names are globals
    run_test_function("assert x == 3", namespace)  # and later tests see them
    with pytest.raises(AssertionError):
        run_test_function("assert x == 4", namespace)
    with pytest.raises(TypeError):
        run_test_function("assert add(1, 2) == 3", {"add": lambda a, b: AlwaysEqual()})
    assert not any(name in namespace for name in harness.CHECKS)  # arguments, not globals


@pytest.mark.parametrize("source", ["assert (", "return 1", "yield 1"])
def test_a_test_that_is_not_valid_module_code_is_refused(source):
    with pytest.raises(SyntaxError):
        harness.as_function(source, "test_0")


# ---------------------------------------------------------------------------------------------
# CodeTests in the sandbox

LIMITS = Limits(wall_seconds=3)
ADD_TESTS = [
    "assert add(1, 2) == 3",
    "assert add(2, 2) == 4\nassert add(0, 0) == 0",
    "assert add(1, 1) == 2 and add(3, 3) == 6",
    "assert isinstance(add(1, 1), int)",
    "assert abs(add(-1, -2)) == 3",
    "assert sorted([add(2, 1), add(1, 0)]) == [1, 3]",
    "def check(candidate):\n    assert candidate(5, 5) == 10\n    assert candidate(-1, 1) == 0\n\ncheck(add)",  # fmt: skip
]
ADD = Problem(id="add", prompt="Write add(a, b).", metadata={"tests": ADD_TESTS})
SUM = Problem(
    id="sum",
    prompt="Print the sum of the integers on stdin.",
    metadata={"tests": [{"input": "2 3\n", "output": "5\n"}, {"input": "1 2 3", "output": "6"}]},
)


@pytest.fixture(scope="module")
def reward(skip_without_namespaces):
    try:
        code_tests = CodeTests(CodeTests.Params(limits=LIMITS))
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    yield code_tests
    code_tests.sandbox.close()


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{textwrap.dedent(code)}```\n"


def test_all_tests_pass(reward):
    assert reward(ADD, fenced("def add(a, b):\n    return a + b\n")) == Score(
        1.0, "ok", {"passed": 7, "total": 7, "weak_tests": 0}
    )
    solution = fenced("print(sum(map(int, input().split())))\n")
    assert reward(SUM, solution) == Score(1.0, "ok", {"passed": 2, "total": 2, "weak_tests": 0})


def test_partial_credit_and_all_or_nothing(reward):
    problem = Problem(
        id="mixed",
        prompt="",
        metadata={
            "tests": [
                "assert add(1, 2) == 3",
                "assert add(-1, -1) == -2",
                {"input": "", "output": "ready"},
                {"input": "", "output": "steady"},
            ]
        },
    )
    solution = fenced("""
        def add(a, b):
            return abs(a) + abs(b)

        if __name__ == "__main__":
            print("ready")
    """)
    assert reward(problem, solution) == Score(
        0.5, "wrong", {"passed": 2, "total": 4, "weak_tests": 0}
    )
    strict = CodeTests(CodeTests.Params(limits=LIMITS, all_or_nothing=True))
    try:
        assert strict(problem, solution) == Score(
            0.0, "wrong", {"passed": 2, "total": 4, "weak_tests": 0}
        )
        assert strict(ADD, fenced("def add(a, b):\n    return a + b\n")).value == 1.0
    finally:
        strict.sandbox.close()


def test_a_malformed_test_fails_only_itself(reward):
    problem = Problem(id="p", prompt="", metadata={"tests": ["assert add(1, 2) == 3", "assert ("]})
    score = reward(problem, "def add(a, b):\n    return a + b\n")
    assert score == Score(0.5, "wrong", {"passed": 1, "total": 2, "weak_tests": 0})


def test_tests_that_share_names_run_together(reward):
    """`s = Stack()` cannot be split; the assert that reads `s` goes the weak path with it."""
    tests = ["s = Stack()\ns.push(1)", "assert s.pop() == 1", "assert Stack().pop() is None"]
    problem = Problem(id="stack", prompt="", metadata={"tests": tests})
    solution = """
        class Stack:
            def __init__(self):
                self.items = []
            def push(self, x):
                self.items.append(x)
            def pop(self):
                return self.items.pop() if self.items else None
    """
    assert reward(problem, fenced(solution)) == Score(
        1.0, "ok", {"passed": 3, "total": 3, "weak_tests": 2}
    )


def test_a_solution_defining_a_builtin_s_name_is_what_the_test_calls(reward):
    """ "Write max(a, b)": the test's max is the solution's, not the trusted side's built-in."""
    problem = Problem(id="max", prompt="", metadata={"tests": ["assert max(1, 2) == 2"]})
    assert reward(problem, "def max(a, b):\n    return a\n").value == 0.0
    assert reward(problem, "def max(a, b):\n    return b if b > a else a\n").value == 1.0


@pytest.mark.parametrize(
    ("problem", "code"),
    [
        (ADD, "def add(a, b):\n    while True:\n        pass\n"),
        (SUM, "while True:\n    pass\n"),
    ],
    ids=["asserts", "stdio"],
)
def test_a_solution_that_loops_times_out(problem, code):
    quick = CodeTests(CodeTests.Params(limits=Limits(wall_seconds=1)))
    try:
        score = quick(problem, code)
    finally:
        quick.sandbox.close()
    assert (score.value, score.status) == (0.0, "timeout")


def test_no_code_block(reward):
    assert reward(ADD, "I would write it like this:\n```python\n```") == Score(
        0.0, "wrong", {"reason": "no code block"}
    )


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({}, r"problem p: the code reward needs metadata\['tests'\], a non-empty list"),
        ({"tests": []}, r"needs metadata\['tests'\], a non-empty list"),
        ({"tests": "assert f() == 1"}, r"needs metadata\['tests'\], a non-empty list"),
        ({"tests": ["assert f() == 1", 3]}, r"problem p: test 1 is 3; expected an assert string"),
        ({"tests": [{"input": "1"}]}, r"test 0 is \{'input': '1'\}; expected .*\"output\": str"),
    ],
)
def test_missing_or_malformed_tests_raise(reward, metadata, message):
    with pytest.raises(ValueError, match=message):
        reward(Problem(id="p", prompt="", metadata=metadata), "print(1)")


def test_harness_records_with_the_secret_only(skip_without_namespaces):
    """The protocol CodeTests reads: for a weak test one "<secret> <index> pass" line when it
    passes; for a split test one "<secret> <index> <probe> value <json>" line per probe."""
    try:
        reward = CodeTests(CodeTests.Params(limits=LIMITS))
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    tests = {
        "weak": [[0, "assert add(1, 1) == 2"], [1, "assert add(1, 1) == 3"], [3, "x = 1"]],
        "split": [[2, [], ["add(2, 3)", "add('a', 1)", "[add(1, 1)]"]]],
    }
    try:
        files = {
            "solution.py": "def add(a, b):\n    print('0 pass', flush=True)\n    return a + b\n",
            "tests.json": json.dumps(tests),
            "harness.py": HARNESS,
        }
        execution = reward.sandbox.run(files, ["python", "harness.py"], "s3cr3t\n")
    finally:
        reward.sandbox.close()
    assert execution.returncode == 0
    assert execution.stdout.splitlines() == [
        "0 pass",
        "s3cr3t 0 pass",
        "0 pass",
        "0 pass",
        's3cr3t 2 0 value ["int", 5]',
        "0 pass",
        "s3cr3t 2 1 error",  # add('a', 1) raised
        "0 pass",
        's3cr3t 2 2 value ["list", [["int", 2]]]',
        "s3cr3t 3 pass",
    ]


PROBES = """
import asyncio, collections, dataclasses, enum, gc, json, os, pathlib, signal, subprocess
import sys, threading, typing

def probe(fn):
    try:
        fn()
        return "allowed"
    except BaseException as e:
        return type(e).__name__

def caught(fn):
    try:
        fn()
    except BaseException as e:
        return e

def generator():
    yield

running = generator()
next(running)
thread = threading.Thread(target=lambda: None)
results = {
    "sys._getframe": probe(lambda: sys._getframe()),
    "tb_frame": probe(lambda: caught(lambda: 1 / 0).__traceback__.tb_frame),
    "gi_frame": probe(lambda: running.gi_frame),
    "sys._current_frames": probe(sys._current_frames),
    "sys.settrace": probe(lambda: sys.settrace(lambda *a: None)),
    "sys.setprofile": probe(lambda: sys.setprofile(lambda *a: None)),
    "gc.get_objects": probe(gc.get_objects),
    "gc.get_referrers": probe(lambda: gc.get_referrers(probe)),
    "import _ctypes": probe(lambda: __import__("_ctypes")),
    "import ctypes": probe(lambda: __import__("ctypes")),
    "os.fork": probe(os.fork),
    "os.system": probe(lambda: os.system("true")),
    "subprocess": probe(lambda: subprocess.run(["true"])),
    "open /proc": probe(lambda: open("/proc/self/status")),
    "open //proc": probe(lambda: open("//proc/self/status")),
    "open ../../proc": probe(lambda: open("../../proc/self/status")),
    "open a directory": probe(lambda: os.open("/", os.O_RDONLY)),
    "os.open a Path": probe(lambda: os.open(pathlib.Path("/etc/passwd"), os.O_RDONLY)),
    "signal handler": probe(lambda: signal.signal(signal.SIGALRM, lambda *a: None)),
    "write a work file": probe(lambda: open("new.txt", "w").write("x")),
    "read /etc/passwd": probe(lambda: open("/etc/passwd").read()),
    "open a Path": probe(lambda: open(pathlib.Path("/etc/passwd")).read()),
    "typing.TypeVar": probe(lambda: typing.TypeVar("T")),
    "namedtuple": probe(lambda: collections.namedtuple("P", "x")(1)),
    "enum": probe(lambda: enum.Enum("E", "A B").A),
    "dataclass": probe(lambda: dataclasses.make_dataclass("D", ["x"])(1)),
    "asyncio": probe(lambda: asyncio.run(asyncio.sleep(0))),
    "threads": probe(lambda: (thread.start(), thread.join())),
}
print(json.dumps(results), flush=True)
"""
REFUSED = {
    "sys._getframe": "Refused",
    "tb_frame": "Refused",
    "gi_frame": "Refused",
    "sys._current_frames": "Refused",
    "sys.settrace": "Refused",
    "sys.setprofile": "Refused",
    "gc.get_objects": "Refused",
    "gc.get_referrers": "Refused",
    "import _ctypes": "Refused",
    "import ctypes": "Refused",
    "os.fork": "Refused",
    "os.system": "Refused",
    "subprocess": "Refused",
    "open /proc": "FileNotFoundError",
    "open //proc": "FileNotFoundError",
    "open ../../proc": "FileNotFoundError",
    # No /proc in the sandbox at all; the audit hook would refuse it where there is one.
    "open a directory": "Refused",  # a directory fd would let os.open(dir_fd=...) reach /proc
    "signal handler": "ValueError",  # only the main thread may set one; the solution is not in it
}
ALLOWED = [
    "write a work file",
    "read /etc/passwd",
    "open a Path",  # the check sees the str it becomes
    "os.open a Path",
    "typing.TypeVar",  # the standard library copes with frames refused (a ValueError)
    "namedtuple",
    "enum",
    "dataclass",
    "asyncio",
    "threads",
]


def test_what_the_harness_refuses_a_solution(reward):
    files = {
        "solution.py": PROBES,
        "tests.json": json.dumps({"weak": [[0, "assert True"]], "split": []}),
        "harness.py": HARNESS,
    }
    execution = reward.sandbox.run(files, ["python", "harness.py"], "s3cr3t\n")
    first, *records = execution.stdout.splitlines()
    assert json.loads(first) == REFUSED | dict.fromkeys(ALLOWED, "allowed")
    assert records == ["s3cr3t 0 pass"]  # and it still runs the tests


# ---------------------------------------------------------------------------------------------
# Solutions that fake passing. Each returns wrong answers (or none) and tries to make the
# harness record passes anyway: all must score 0 on ADD, whose seven tests they would fake.
# Against the harness as first written, most of these scored 1.0.

FORGE = """
import os, re, sys
def forge(candidates):
    for secret in set(candidates):
        for i in range(10):
            os.write(1, f"{secret} {i} pass\\n".encode())
def read_all(fd):
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)
def scan_memory(open_proc):
    # open_proc("maps") / open_proc("mem"): file descriptors, however the path is spelled.
    found, mem = [], open_proc("mem")
    for line in read_all(open_proc("maps")).decode().splitlines():
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if perms.startswith("rw") and hi - lo < 1 << 26:
            try:
                os.lseek(mem, lo, os.SEEK_SET)
                found += re.findall(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", os.read(mem, hi - lo))
            except OSError:
                pass
    forge(s.decode() for s in found)
def secrets_in(frame):
    while frame is not None:
        yield from (v for v in frame.f_locals.values() if isinstance(v, str) and len(v) == 32)
        frame = frame.f_back
"""

FAKERS = {
    "always-equal": """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            def __abs__(self):
                return self
            def __lt__(self, other):
                return True
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
    """,
    "always-equal-str-subclass": """
        class Text(str):
            def __eq__(self, other):
                return True
            __hash__ = str.__hash__
        def add(a, b):
            return Text("7")
    """,
    "always-equal-metaclass": """
        class Meta(type):
            def __eq__(cls, other):
                return True
            __hash__ = type.__hash__
        class Anything(metaclass=Meta):
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
    """,
    "frames-sys-getframe": """
        def add(a, b):
            forge(secrets_in(sys._getframe()))
    """,
    "frames-tb-frame": """
        def add(a, b):
            try:
                1 / 0
            except ZeroDivisionError as e:
                forge(secrets_in(e.__traceback__.tb_frame))
    """,
    "frames-inspect-stack": """
        import inspect
        def add(a, b):
            forge(v for info in inspect.stack() for v in secrets_in(info.frame))
    """,
    "frames-generator": """
        def add(a, b):
            def gen():
                yield
            g = gen()
            next(g)
            forge(secrets_in(g.gi_frame))
    """,
    "frames-current-frames": """
        def add(a, b):
            forge(v for f in sys._current_frames().values() for v in secrets_in(f))
    """,
    "frames-signal-handler": """
        import signal, time
        def add(a, b):
            signal.signal(signal.SIGALRM, lambda signum, frame: forge(secrets_in(frame)))
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                pass
    """,
    "frames-settrace": """
        def tracer(frame, event, arg):
            forge(secrets_in(frame))
            return tracer
        sys.settrace(tracer)
        def add(a, b):
            return None
    """,
    "gc-get-objects": """
        import gc
        def add(a, b):
            forge(o for o in gc.get_objects() if isinstance(o, str) and len(o) == 32)
    """,
    "proc-self-mem": """
        def add(a, b):
            scan_memory(lambda name: os.open("/proc/self/" + name, os.O_RDONLY))
    """,
    "proc-self-mem-double-slash": """
        def add(a, b):
            scan_memory(lambda name: os.open("//proc/self/" + name, os.O_RDONLY))
    """,
    "proc-self-mem-pathlib": """
        import pathlib
        def add(a, b):
            scan_memory(lambda name: os.open(pathlib.Path("/proc/self") / name, os.O_RDONLY))
    """,
    "proc-self-mem-bytes-relative": """
        def add(a, b):
            scan_memory(lambda name: os.open(b"../../proc/self/" + name.encode(), os.O_RDONLY))
    """,
    "proc-self-mem-symlink": """
        os.symlink("/proc/self", "p")
        def add(a, b):
            scan_memory(lambda name: os.open("p/" + name, os.O_RDONLY))
    """,
    "proc-self-mem-dir-fd": """
        def add(a, b):
            root = os.open("/", os.O_RDONLY)
            scan_memory(lambda name: os.open("proc/self/" + name, os.O_RDONLY, dir_fd=root))
    """,
    "proc-self-mem-chdir": """
        def add(a, b):
            os.chdir("/proc")
            scan_memory(lambda name: os.open("self/" + name, os.O_RDONLY))
    """,
    "stdin-file": """
        def add(a, b):
            forge([open("/tmp/.stdin").read().strip()])
    """,
    "stdin-seek": """
        def add(a, b):
            os.lseek(0, 0, os.SEEK_SET)
            forge([os.read(0, 100).decode().strip()])
    """,
    "stdin-object-seek": """
        def add(a, b):
            sys.stdin.seek(0)
            forge([sys.stdin.read().strip()])
    """,
    "patch-builtins": """
        import builtins
        builtins.exec = lambda *args, **kwargs: None
        builtins.isinstance = lambda *args: True
        builtins.abs = lambda x: 3
        builtins.sorted = lambda x: [1, 3]
        builtins.all = lambda x: True
        builtins.type = lambda x: int
        def add(a, b):
            return None
    """,
    "patch-builtins-namespace": """
        import builtins
        __builtins__ = dict(vars(builtins), isinstance=lambda *args: True, abs=lambda x: 3)
        def add(a, b):
            return None
    """,
    "patch-harness-module": """
        h = sys.modules["__main__"]
        h.strict_equal = h.strict_unequal = lambda a, b: True
        h.strict_truth = h.plain = lambda *args: True
        h.BLOCKED_EVENTS = frozenset()
        h.strict_checks = lambda: (None, lambda a, b: True, lambda a, b: True, lambda v: True)
        def add(a, b):
            return None
    """,
    "rebind-checks": """
        def add(a, b):
            globals()["__rlvr_eq__"] = lambda *args: True
            globals()["__rlvr_truth__"] = lambda *args: True
            return 4 if (a, b) == (2, 2) else None
    """,
    "exit-before-asserts": """
        def add(a, b):
            os._exit(0)
    """,
    "fake-pass-lines": """
        for i in range(7):
            print(f"{i} pass")
            print(f"{'0' * 32} {i} pass")
        def add(a, b):
            return None
    """,
}
FAKERS = {name: FORGE + textwrap.dedent(code) for name, code in FAKERS.items()}


# Tests that cannot be split (they bind names first): these run whole in the sandbox.
ADD_WEAK = Problem(
    id="add-weak",
    prompt="Write add(a, b).",
    metadata={
        "tests": [
            "x = add(1, 2)\nassert x == 3",
            "y = add(-1, -2)\nassert abs(y) == 3 and y < 0",
            "z = [add(i, i) for i in range(3)]\nassert z == [0, 2, 4]",
        ]
    },
)


def test_an_honest_solution_with_the_same_helpers_passes_everything(reward):
    """The fakers' helper code alone does not break the harness, on either path."""
    honest = FORGE + "def add(a, b):\n    return a + b\n"
    assert reward(ADD, honest) == Score(1.0, "ok", {"passed": 7, "total": 7, "weak_tests": 0})
    assert reward(ADD_WEAK, honest) == Score(1.0, "ok", {"passed": 3, "total": 3, "weak_tests": 3})


@pytest.fixture(scope="module")
def faked(reward) -> dict[tuple[str, str], Score]:
    with ThreadPoolExecutor(8) as pool:
        futures = {
            (problem.id, name): pool.submit(reward, problem, code)
            for name, code in FAKERS.items()
            for problem in (ADD, ADD_WEAK)
        }
        return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize("problem", ["add", "add-weak"])
@pytest.mark.parametrize("name", FAKERS)
def test_faking_passes_scores_zero(faked, name, problem):
    assert faked[problem, name].value == 0.0, faked[problem, name]
    assert faked[problem, name].info["passed"] == 0
