"""Runs tests against a solution inside the sandbox (a stdlib-only script).

Two kinds of test arrive in tests.json. Split tests (see rlvr.rewards.code_tests) are only
probes: expressions calling into the solution, whose values this harness encodes as tagged JSON
for the trusted side to compare; what those tests expect is never here. Weak tests could not be
split and run whole here: after each one passes, a line "<secret> <index> pass" is recorded. Every
record goes to a private duplicate of stdout, prefixed with the per-run secret that arrives on
stdin; the files are deleted and stdin is pointed at /dev/null before the solution runs.
The solution and tests run in a second thread (only the main thread may set signal handlers, and
a handler is handed the running frame), and where weak tests run an audit hook keeps the solution
from reaching the secret: no frames, no gc walks, no ctypes, no /proc, no new processes. The hook, the checks and
the test loop use only what they bound before the solution ran, builtins are restored before
each test, and each weak test runs as a function that receives the checks as arguments, so
patching builtins or this module, or rebinding names, does not reach them. Every comparison in a
weak test's asserts accepts only plain built-in values, so an object whose `__eq__` or `__lt__`
always returns True does not pass.
"""

import _thread
import ast
import builtins
import json
import operator
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
CHECKS = ("__rlvr_compare__", "__rlvr_truth__")
TEST = "__rlvr_test__"
MAX_DEPTH = 64
MAX_VALUE_CHARS = 1 << 20
OPERATORS = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge, "is": operator.is_, "is not": operator.is_not,
    "in": operator.contains, "not in": operator.contains,  # operands swapped below
}  # fmt: skip
SYMBOLS = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}  # fmt: skip


class Refused(PermissionError, ValueError):
    """What the audit hook raises. Also a ValueError because the standard library catches that
    where frames are unavailable (typing.TypeVar, collections.namedtuple, enum, logging)."""


def strict_checks():
    """(plain, strict_compare, strict_truth), closures over the built-ins they use, bound now:
    patching builtins or this module afterwards does not change them."""
    type_, id_, all_, bool_, items, refuse, zip_ = type, id, all, bool, dict.items, TypeError, zip
    plain_types = frozenset(map(id, (int, float, complex, str, bytes, bool, type(None))))
    containers, dict_type = frozenset(map(id, (list, tuple, set, frozenset))), id(dict)
    operators, contains = dict(OPERATORS), operator.contains

    def plain(value) -> bool:
        """Built from built-in types only, so comparisons mean what they say. Types are compared
        by identity: a metaclass with its own __eq__ cannot pass for int."""
        kind = id_(type_(value))
        if kind in plain_types:
            return True
        if kind in containers:
            return all_(plain(v) for v in value)
        if kind == dict_type:
            return all_(plain(k) and plain(v) for k, v in items(value))
        return False

    def strict_compare(ops: tuple, *operands) -> bool:
        """`operands[0] ops[0] operands[1] ...` as Python chains it; TypeError (the test fails)
        unless every operand is plain. Operands are evaluated before the call, not lazily: a
        chain cut short is False, so the assert fails either way."""
        for value in operands:
            if not plain(value):
                raise refuse("tests compare only plain built-in values")
        for op, left, right in zip_(ops, operands, operands[1:]):
            if op in ("in", "not in"):
                result = contains(right, left) == (op == "in")
            else:
                result = operators[op](left, right)
            if not result:
                return False
        return True

    def strict_truth(value) -> bool:
        if not plain(value):
            raise refuse("tests compare only plain built-in values")
        return bool_(value)

    return plain, strict_compare, strict_truth


plain, strict_compare, strict_truth = strict_checks()


def value_encoder():
    """encode(value) -> tagged JSON text of a plain value (what rlvr.rewards.code_tests.decode
    reads); TypeError for anything else. Bound now, like the checks."""
    type_, dumps, float_repr, items, hex_ = type, json.dumps, float.__repr__, dict.items, bytes.hex
    sequences = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}
    scalars = {bool: "bool", int: "int", str: "str"}
    refuse, too_deep = TypeError, RecursionError

    def tagged(value, depth: int):
        if depth > MAX_DEPTH:
            raise too_deep("value nested too deeply")
        kind = type_(value)
        if value is None:
            return ["none"]
        if kind in scalars:
            return [scalars[kind], value]
        if kind is float:
            return ["float", float_repr(value)]
        if kind is complex:
            return ["complex", [float_repr(value.real), float_repr(value.imag)]]
        if kind is bytes:
            return ["bytes", hex_(value)]
        if kind in sequences:
            return [sequences[kind], [tagged(v, depth + 1) for v in value]]
        if kind is dict:
            return ["dict", [[tagged(k, depth + 1), tagged(v, depth + 1)] for k, v in items(value)]]
        raise refuse(f"a {kind.__name__} is not a plain value")

    def encode(value) -> str:
        text = dumps(tagged(value, 0))
        if len(text) > MAX_VALUE_CHARS:
            raise refuse("value too large")
        return text

    return encode


class StrictAsserts(ast.NodeTransformer):
    """In an assert, every comparison `a < b <= c` -> `__rlvr_compare__(("<", "<="), a, b, c)`
    (also inside `and`, calls, comprehensions), and `assert x` -> `assert __rlvr_truth__(x)`
    unless x is a comparison or `not ...`."""

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        node.test = _StrictComparisons().visit(node.test)
        test = node.test
        checked = isinstance(test, ast.Call) and getattr(test.func, "id", None) in CHECKS
        if not (checked or isinstance(test, ast.UnaryOp)):
            node.test = ast.Call(ast.Name("__rlvr_truth__", ast.Load()), [test], [])
        return ast.fix_missing_locations(node)


class _StrictComparisons(ast.NodeTransformer):
    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        ops = ast.Tuple([ast.Constant(SYMBOLS[type(op)]) for op in node.ops], ast.Load())
        operands = [node.left, *node.comparators]
        call = ast.Call(ast.Name("__rlvr_compare__", ast.Load()), [ops, *operands], [])
        return ast.copy_location(call, node)


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


def compile_tests(tests: dict, namespace: dict) -> list:
    """(index, kind, code): a weak test as a function of the checks (whose globals are the
    solution's namespace), a split test as its setup statements and probe expressions.
    Compiled before the solution runs."""
    compiled = []
    for index, source in tests["weak"]:
        try:
            exec(as_function(source, f"test_{index}"), namespace)
        except Exception:  # noqa: BLE001, S112 - a malformed test passes for no solution
            continue
        compiled.append((index, "weak", namespace.pop(TEST)))
    for index, setup, probes in tests["split"]:
        name = f"test_{index}"
        statements = [compile(s, name, "exec") for s in setup]
        compiled.append((index, "split", (statements, [compile(p, name, "eval") for p in probes])))
    return sorted(compiled, key=lambda test: test[0])  # in the problem's order, as written


def run_tests() -> None:
    secret = sys.stdin.read().strip()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # stdin held the secret: seeking back on it must find nothing
    os.close(devnull)
    with open("solution.py") as f:
        solution = f.read()
    namespace = {"__name__": "solution", "__builtins__": builtins}
    with open("tests.json") as f:
        tests = compile_tests(json.load(f), namespace)
    for name in ("solution.py", "tests.json", "harness.py"):
        os.remove(name)
    _, *checks = strict_checks()
    encode, run, evaluate = value_encoder(), exec, eval
    restore, saved = vars(builtins).update, dict(vars(builtins))
    record, out, failure, module = os.write, os.dup(1), BaseException, builtins
    if any(kind == "weak" for _, kind, _ in tests):
        # Only weak tests need the secret kept: split tests' verdicts are made outside, and
        # without the hook their solutions may use what it refuses (numpy imports need frames).
        sys.addaudithook(audit_hook())
    # From here on the solution may have patched anything: only locals bound above are used.
    try:
        run(compile(solution, "solution.py", "exec"), namespace)
    except failure:  # noqa: BLE001 - a solution that fails to load passes nothing
        return
    for index, kind, test in tests:
        restore(saved)
        namespace["__builtins__"] = module
        if kind == "weak":
            try:
                test(*checks)
            except failure:  # noqa: BLE001, S112 - a failing test only fails itself
                continue
            record(out, f"{secret} {index} pass\n".encode())
            continue
        statements, probes = test
        try:
            for statement in statements:
                run(statement, namespace)
        except failure:  # noqa: BLE001, S112 - its probes are then missing: the test fails
            continue
        for number, probe in enumerate(probes):
            try:
                line = "value " + encode(evaluate(probe, namespace))
            except failure:  # noqa: BLE001 - raising or not plain fails only this probe
                line = "error"
            record(out, f"{secret} {index} {number} {line}\n".encode())


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
