"""Runs assert-style tests against a solution inside the sandbox (a stdlib-only script).

The solution and tests arrive as files and the per-run secret on stdin; the files are deleted
before the solution runs. After each test passes, a line "<secret> <index> pass" is written to
a private duplicate of stdout. The scorer counts only those lines, so exiting early, printing
fake PASS lines or patching test frameworks gains nothing. An audit hook keeps the solution
from reaching the secret: no frames, no gc walks, no ctypes, no /proc, no new processes.
Comparisons in tests accept only plain built-in values, so an object whose `__eq__` always
returns True does not pass.
"""

import ast
import json
import os
import sys

PLAIN = (int, float, complex, str, bytes, bool, type(None))
CONTAINERS = (list, tuple, set, frozenset)
FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}  # the audited ways to a frame
BLOCKED_EVENTS = {
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "pty.spawn",
}


def audit(event: str, args: tuple) -> None:
    blocked = (
        event in BLOCKED_EVENTS
        or event.startswith("ctypes.")
        or (event == "object.__getattr__" and args[1] in FRAME_ATTRIBUTES)
        or (event == "open" and isinstance(args[0], str) and args[0].startswith("/proc"))
    )
    if blocked:
        raise PermissionError(f"{event} is not allowed in tests")


def plain(value: object) -> bool:
    """Built from built-in types only, so == means what it says."""
    if type(value) in PLAIN:
        return True
    if type(value) in CONTAINERS:
        return all(plain(v) for v in value)
    if type(value) is dict:
        return all(plain(k) and plain(v) for k, v in value.items())
    return False


def strict_equal(left: object, right: object) -> bool:
    return plain(left) and plain(right) and left == right


def strict_unequal(left: object, right: object) -> bool:
    return plain(left) and plain(right) and left != right


def strict_truth(value: object) -> bool:
    return plain(value) and bool(value)


class StrictAsserts(ast.NodeTransformer):
    """`assert a == b` -> `assert __rlvr_eq__(a, b)` (and != alike); `assert x` ->
    `assert __rlvr_truth__(x)`. Other comparisons (<, in, ...) are left as written."""

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        test = node.test
        if isinstance(test, ast.Compare):
            if len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
                check = "__rlvr_eq__" if isinstance(test.ops[0], ast.Eq) else "__rlvr_ne__"
                args = [test.left, *test.comparators]
                node.test = ast.Call(ast.Name(check, ast.Load()), args, [])
        elif not isinstance(test, ast.UnaryOp):
            node.test = ast.Call(ast.Name("__rlvr_truth__", ast.Load()), [test], [])
        return ast.fix_missing_locations(node)


def main() -> None:
    secret = sys.stdin.read().strip()
    with open("solution.py") as f:
        solution = f.read()
    with open("tests.json") as f:
        tests = [
            compile(StrictAsserts().visit(ast.parse(t)), f"test_{i}", "exec")
            for i, t in enumerate(json.load(f))
        ]
    for name in ("solution.py", "tests.json", "harness.py"):
        os.remove(name)
    record, out = os.write, os.dup(1)
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    sys.addaudithook(audit)
    try:
        exec(compile(solution, "solution.py", "exec"), namespace)
    except BaseException:  # noqa: BLE001 - a solution that fails to load passes nothing
        return
    for index, test in enumerate(tests):
        namespace.update(__rlvr_eq__=strict_equal, __rlvr_ne__=strict_unequal)
        namespace["__rlvr_truth__"] = strict_truth
        try:
            exec(test, namespace)
        except BaseException:  # noqa: BLE001, S112 - a failing test only fails itself
            continue
        record(out, f"{secret} {index} pass\n".encode())


if __name__ == "__main__":
    main()
