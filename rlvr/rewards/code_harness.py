"""Runs assert-style tests against a solution inside the sandbox (a stdlib-only script).

The solution and tests arrive as files and the per-run secret on stdin; the files are deleted
and stdin is pointed at /dev/null before the solution runs. After each test passes, a line
"<secret> <index> pass" is written to a private duplicate of stdout. The scorer counts only
those lines, so exiting early, printing fake PASS lines or patching test frameworks gains
nothing. The solution and tests run in a second thread (only the main thread may set signal
handlers, and a handler is handed the running frame), and an audit hook keeps the solution from
reaching the secret: no frames, no gc walks, no ctypes, no /proc, no new processes. The hook,
the checks and the test loop use only what they bound before the solution ran, builtins are
restored before each test, and each test runs as a function that receives the checks as
arguments, so patching builtins or this module, or rebinding names, does not reach them.
`==` and `!=` in asserts accept only plain built-in values, so an object whose `__eq__` always
returns True does not pass.
"""

import _thread
import ast
import builtins
import json
import os
import stat
import symtable
import sys

FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})  # audited ways
BLOCKED_EVENTS = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "sys.settrace",
        "sys.setprofile",
        "sys._settraceallthreads",
        "sys._setprofileallthreads",
        "sys.monitoring.register_callback",  # its callbacks see call arguments
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
)
CHECKS = ("__rlvr_eq__", "__rlvr_ne__", "__rlvr_truth__")
TEST = "__rlvr_test__"


class Refused(PermissionError, ValueError):
    """What the audit hook raises. Also a ValueError because the standard library catches that
    where frames are unavailable (typing.TypeVar, collections.namedtuple, enum, logging)."""


def strict_checks():
    """(plain, strict_equal, strict_unequal, strict_truth), closures over the built-ins they use,
    bound now: patching builtins or this module afterwards does not change them."""
    type_, id_, all_, bool_, items, refuse = type, id, all, bool, dict.items, TypeError
    plain_types = frozenset(map(id, (int, float, complex, str, bytes, bool, type(None))))
    containers, dict_type = frozenset(map(id, (list, tuple, set, frozenset))), id(dict)

    def plain(value) -> bool:
        """Built from built-in types only, so == means what it says. Types are compared by
        identity: a metaclass with its own __eq__ cannot pass for int."""
        kind = id_(type_(value))
        if kind in plain_types:
            return True
        if kind in containers:
            return all_(plain(v) for v in value)
        if kind == dict_type:
            return all_(plain(k) and plain(v) for k, v in items(value))
        return False

    def both_plain(left, right) -> None:
        if not (plain(left) and plain(right)):
            raise refuse("tests compare only plain built-in values")

    def strict_equal(left, right) -> bool:
        """left == right; TypeError (the test fails) unless both are plain."""
        both_plain(left, right)
        return left == right

    def strict_unequal(left, right) -> bool:
        both_plain(left, right)
        return left != right

    def strict_truth(value) -> bool:
        both_plain(value, None)
        return bool_(value)

    return plain, strict_equal, strict_unequal, strict_truth


plain, strict_equal, strict_unequal, strict_truth = strict_checks()


class StrictAsserts(ast.NodeTransformer):
    """In an assert, every `a == b` -> `__rlvr_eq__(a, b)` and `a != b` -> `__rlvr_ne__(a, b)`
    (also inside `and`, calls, comprehensions), and `assert x` -> `assert __rlvr_truth__(x)`
    unless x is a comparison or `not ...`. Other comparisons (<, in, ...) are left as written."""

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        node.test = _StrictComparisons().visit(node.test)
        test = node.test
        checked = isinstance(test, ast.Call) and getattr(test.func, "id", None) in CHECKS
        if not (checked or isinstance(test, (ast.Compare, ast.UnaryOp))):
            node.test = ast.Call(ast.Name("__rlvr_truth__", ast.Load()), [test], [])
        return ast.fix_missing_locations(node)


class _StrictComparisons(ast.NodeTransformer):
    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            check = "__rlvr_eq__" if isinstance(node.ops[0], ast.Eq) else "__rlvr_ne__"
            call = ast.Call(ast.Name(check, ast.Load()), [node.left, *node.comparators], [])
            return ast.copy_location(call, node)
        return node


def as_function(source: str, filename: str):
    """Code defining `__rlvr_test__(<checks>)` with the test as its body, asserts made strict.
    The names the test binds at top level are declared global, so it runs as module code would,
    except that the checks are arguments: the solution can neither reach nor rebind them."""
    compile(source, filename, "exec")  # what is not valid module code (a top-level return) fails
    tree = StrictAsserts().visit(ast.parse(source, filename))
    symbols = symtable.symtable(source, filename, "exec").get_symbols()
    names = {s.get_name() for s in symbols if s.is_assigned() or s.is_imported()}
    names -= {s.get_name() for s in symbols if s.is_annotated()}  # those cannot be global
    function = ast.parse(f"def {TEST}({', '.join(CHECKS)}): pass").body[0]
    declared = sorted(names - set(CHECKS))
    function.body = ([ast.Global(declared)] if declared else []) + (tree.body or [ast.Pass()])
    return compile(ast.fix_missing_locations(ast.Module([function], [])), filename, "exec")


def audit_hook():
    """The hook, a closure over what it uses, bound now, like the checks."""
    blocked, frame_attributes, refuse = BLOCKED_EVENTS, FRAME_ATTRIBUTES, Refused
    missing = (OSError, ValueError)
    starts, stat_, is_dir, type_, id_ = str.startswith, os.stat, stat.S_ISDIR, type, id
    path_types = frozenset(map(id, (str, bytes, int)))
    try:
        proc = os.stat("/proc/self").st_dev
    except OSError:
        proc = None  # no procfs here

    def audit(event: str, args: tuple) -> None:
        if (
            event in blocked
            or starts(event, "ctypes.")
            or (event == "object.__getattr__" and args[1] in frame_attributes)
        ):
            raise refuse(f"{event} is not allowed in tests")
        if event == "import" and starts(args[0], "_ctypes"):
            raise refuse("ctypes is not allowed in tests")  # its C types read memory unaudited
        if event == "open":
            # Judged by what the path is, not how it is spelled ("//proc", relative, a symlink).
            # Other path types could name one file here and another to open; a directory fd
            # would let os.open(dir_fd=...) reach a file this check never saw.
            path = args[0]
            if id_(type_(path)) not in path_types:
                raise refuse("tests open files by str, bytes or fd")
            try:
                info = stat_(path)
            except missing:
                return  # nothing there yet (a file being created)
            if info.st_dev == proc or is_dir(info.st_mode):
                raise refuse(f"opening {path!r} is not allowed in tests")

    return audit


def run_tests() -> None:
    secret = sys.stdin.read().strip()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # stdin held the secret: seeking back on it must find nothing
    os.close(devnull)
    with open("solution.py") as f:
        solution = f.read()
    with open("tests.json") as f:
        sources = json.load(f)
    for name in ("solution.py", "tests.json", "harness.py"):
        os.remove(name)
    namespace = {"__name__": "solution", "__builtins__": builtins}
    tests = []
    for index, source in enumerate(sources):
        try:
            exec(as_function(source, f"test_{index}"), namespace)
        except Exception:  # noqa: BLE001, S112 - a malformed test passes for no solution
            continue
        tests.append((index, namespace.pop(TEST)))
    _, *checks = strict_checks()
    restore, saved = vars(builtins).update, dict(vars(builtins))
    record, out, failure, module = os.write, os.dup(1), BaseException, builtins
    sys.addaudithook(audit_hook())
    # From here on the solution may have patched anything: only locals bound above are used.
    try:
        exec(compile(solution, "solution.py", "exec"), namespace)
    except failure:  # noqa: BLE001 - a solution that fails to load passes nothing
        return
    for index, test in tests:
        restore(saved)
        namespace["__builtins__"] = module
        try:
            test(*checks)
        except failure:  # noqa: BLE001, S112 - a failing test only fails itself
            continue
        record(out, f"{secret} {index} pass\n".encode())


def main() -> None:
    """Run the tests in a second thread; this one only waits, holding nothing of use."""
    done, leave = _thread.allocate_lock(), os._exit
    done.acquire()

    def worker() -> None:
        try:
            run_tests()
        finally:
            done.release()

    _thread.start_new_thread(worker, ())
    done.acquire()
    leave(0)  # threads the solution started do not keep the process alive


if __name__ == "__main__":
    main()
