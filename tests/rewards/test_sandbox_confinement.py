"""What a sandboxed program shares with the host: memory and processes are capped for the whole
execution, the session keyring is fresh, only the standard library (and named packages) can be
imported, and there is no /proc showing the host's mounts. Each on the root and the
user-namespace path."""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import textwrap

import pytest

from rlvr.envs.tools import PythonTool
from rlvr.rewards.code import CodeTests
from rlvr.rewards.sandbox import Limits, Sandbox, SandboxUnavailableError
from rlvr.types import Problem, Score

LIMITS = Limits(wall_seconds=10)
PATHS = pytest.mark.parametrize("user_namespace", [False, True], ids=["root-path", "userns-path"])
SYS_ADD_KEY = {"x86_64": 248, "aarch64": 217}
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}


@pytest.fixture(scope="module")
def sandboxes(skip_without_namespaces):
    boxes = {}
    try:
        for user_namespace in (False, True):
            boxes[user_namespace] = Sandbox(LIMITS, workers=4, user_namespace=user_namespace)
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    yield boxes
    for box in boxes.values():
        box.close()


def run(box: Sandbox, code: str, **limits):
    execution = box.run_python(textwrap.dedent(code), "", LIMITS.model_copy(update=limits))
    assert execution.error is None, execution
    return execution


def require_cgroup(box: Sandbox) -> None:
    if box.memory_cap != "cgroup":
        pytest.skip(f"no cgroup for executions here, rlimits only: {box.memory_cap_reason}")


# ---------------------------------------------------------------------------------------------
# Memory and processes per execution

CHILDREN_ALLOCATE = """
    import os, time
    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            block = bytearray(200 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1  # touched: resident, not only reserved
            time.sleep(1)
            os._exit(0)
        pids.append(pid)
    print([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids])
"""


@PATHS
def test_memory_is_capped_across_the_execution_s_processes(sandboxes, user_namespace):
    """Four children of 200 MiB each: every one is under the 512 MiB address-space rlimit, but
    together they are over the execution's 512 MiB cap, so the kernel kills some."""
    box = sandboxes[user_namespace]
    require_cgroup(box)
    capped = run(box, CHILDREN_ALLOCATE, memory_mb=512)
    assert capped.memory_cap == "cgroup" and capped.oom_killed and not capped.ok
    codes = eval(capped.stdout)  # noqa: S307 - a list of ints printed by our own program
    assert -signal.SIGKILL in codes and len(codes) == 4
    roomy = run(box, CHILDREN_ALLOCATE, memory_mb=1024)  # the same program fits under 1 GiB
    assert roomy.ok and roomy.stdout == "[0, 0, 0, 0]\n" and not roomy.oom_killed


@PATHS
def test_processes_are_capped_across_the_execution(sandboxes, user_namespace):
    box = sandboxes[user_namespace]
    require_cgroup(box)
    code = """
        import os, time
        started = 0
        for _ in range(20):
            try:
                if os.fork() == 0:
                    time.sleep(2)
                    os._exit(0)
                started += 1
            except OSError:
                pass
        print(started)
    """
    assert int(run(box, code, max_processes=8).stdout) < 8  # PID 1 is one of the eight


def test_the_cap_in_use_is_reported(sandboxes):
    for box in sandboxes.values():
        assert box.memory_cap in ("cgroup", "rlimit")
        assert (box.memory_cap == "rlimit") == bool(box.memory_cap_reason)
        assert run(box, "pass").memory_cap == box.memory_cap


# ---------------------------------------------------------------------------------------------
# Keyring

READ_SESSION_KEYRING = """
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    keyctl = {keyctl}
    buffer = ctypes.create_string_buffer(4096)
    size = libc.syscall(keyctl, 11, -3, buffer, 4096)  # KEYCTL_READ @s: the key ids in it
    print("ids", size)
    found = libc.syscall(keyctl, 10, -3, b"user", {name!r}, 0)  # KEYCTL_SEARCH
    if found > 0:
        size = libc.syscall(keyctl, 11, found, buffer, 4096)
        print("ESCAPED", buffer.raw[:size])
    print("search", found, os.strerror(ctypes.get_errno()))
"""


@PATHS
def test_the_trainer_s_session_keyring_is_out_of_reach(sandboxes, user_namespace):
    machine = os.uname().machine
    if machine not in SYS_ADD_KEY:
        pytest.skip(f"no keyring system call numbers known for {machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    name, payload = f"rlvr-test-{secrets.token_hex(4)}".encode(), secrets.token_hex(8).encode()
    # A session keyring of this process's own, so the key lands where a trainer's would.
    libc.syscall(SYS_KEYCTL[machine], 1, b"rlvr-test-session")  # KEYCTL_JOIN_SESSION_KEYRING
    key = libc.syscall(SYS_ADD_KEY[machine], b"user", name, payload, len(payload), -3)
    if key < 0:
        pytest.skip(f"keyrings unavailable here: {os.strerror(ctypes.get_errno())}")
    try:
        code = READ_SESSION_KEYRING.format(keyctl=SYS_KEYCTL[machine], name=name)
        result = run(sandboxes[user_namespace], code)
    finally:
        libc.syscall(SYS_KEYCTL[machine], 3, key)  # KEYCTL_REVOKE
    assert result.ok, result
    assert "ESCAPED" not in result.stdout and payload.decode() not in result.stdout
    assert result.stdout.splitlines()[0] == "ids 0"  # the session keyring is empty
    assert result.stdout.splitlines()[1].startswith("search -1 ")


# ---------------------------------------------------------------------------------------------
# Packages: the standard library only, unless named

IMPORTS = """
    import importlib.util, json, os, sys
    print(json.dumps({
        "numpy": importlib.util.find_spec("numpy") is not None,
        "site-packages on the path": [p for p in sys.path if "-packages" in p],
        "venv visible": os.path.exists(VENV),
        "base site-packages": os.listdir(SITE) if os.path.isdir(SITE) else None,
    }))
"""


@PATHS
def test_only_the_standard_library_by_default(sandboxes, user_namespace):
    import json
    import site
    import sys

    site_dir = site.getsitepackages([sys.base_prefix])[0]
    code = f"VENV = {sys.prefix!r}\nSITE = {site_dir!r}\n" + textwrap.dedent(IMPORTS)
    seen = json.loads(run(sandboxes[user_namespace], code).stdout)
    assert seen == {
        "numpy": False,
        "site-packages on the path": [],
        "venv visible": sys.prefix == sys.base_prefix,
        "base site-packages": [] if os.path.isdir(site_dir) else None,  # hidden, if any
    }


@PATHS
def test_named_packages_are_importable(user_namespace, skip_without_namespaces):
    try:
        box = Sandbox(LIMITS, workers=1, user_namespace=user_namespace, packages=["numpy"])
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    try:
        result = run(box, "import numpy, json\nprint(int(numpy.arange(5).sum()))\nimport torch")
    finally:
        box.close()
    assert result.stdout == "10\n"
    assert "No module named 'torch'" in result.stderr  # installed, but not named


def test_a_package_that_is_not_installed_is_named_in_the_error():
    with pytest.raises(ValueError, match=r"package 'no_such_pkg_rlvr' is not installed.*pip"):
        Sandbox(packages=["no_such_pkg_rlvr"])


def test_the_code_reward_passes_packages_on(skip_without_namespaces):
    problem = Problem(
        id="mean",
        prompt="",
        metadata={
            "tests": ["assert mean([1, 2, 3]) == 2.0", "assert abs(mean([0, 1]) - 0.5) < 1e-9"]
        },
    )
    solution = "import numpy\ndef mean(xs):\n    return float(numpy.mean(xs))\n"
    try:
        plain = CodeTests(CodeTests.Params(limits=LIMITS))
        with_numpy = CodeTests(CodeTests.Params(limits=LIMITS, packages=["numpy"]))
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    try:
        assert plain(problem, solution).value == 0.0  # numpy is not importable by default
        assert with_numpy(problem, solution) == Score(
            1.0, "ok", {"passed": 2, "total": 2, "weak_tests": 0}
        )
    finally:
        plain.sandbox.close()
        with_numpy.sandbox.close()


def test_the_python_tool_runs_standard_library_code(skip_without_namespaces):
    try:
        tool = PythonTool()
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    try:
        assert tool({"code": "import statistics\nprint(statistics.mean([1, 2, 3]))"}) == "2"
    finally:
        tool.sandbox.close()


# ---------------------------------------------------------------------------------------------
# /proc: not there, so the host's mounts and paths are not either; the standard library copes

NO_PROC = """
    import json, os, subprocess, tempfile, threading
    seen = {}
    for path in ("/proc", "/proc/self/mountinfo", "/proc/mounts", "/proc/self/maps", "/sys"):
        seen[path] = os.path.exists(path)
    seen["cpu_count"] = os.cpu_count() or 0
    seen["subprocess"] = subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    with tempfile.NamedTemporaryFile("w") as f:
        seen["tempfile"] = f.write("x")
    print(json.dumps(seen))
"""


@PATHS
def test_no_proc_and_the_standard_library_still_works(sandboxes, user_namespace):
    import json

    seen = json.loads(run(sandboxes[user_namespace], NO_PROC).stdout)
    assert seen["cpu_count"] >= 1
    assert seen == {
        "/proc": False,
        "/proc/self/mountinfo": False,
        "/proc/mounts": False,
        "/proc/self/maps": False,
        "/sys": False,
        "cpu_count": seen["cpu_count"],
        "subprocess": "hi\n",
        "tempfile": 1,
    }
