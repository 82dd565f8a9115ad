"""The code sandbox: basic limits, a corpus of hostile programs (run alone and scored by the code
reward), refusal without an isolation backend, and the user-namespace path.

The hostile programs print "ESCAPED ..." when an attack works from the inside; the fixture also
checks from the outside: listeners the test opens, files it watches, the host /tmp, surviving
processes, a sentinel process, and each execution's wall time.
"""

from __future__ import annotations

import ast
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlvr.rewards.code import CodeTests
from rlvr.rewards.sandbox import GRACE_SECONDS, Execution, Limits, Sandbox, SandboxUnavailableError
from rlvr.types import Problem, Score

REPO = Path(__file__).resolve().parents[2]
WALL = 3.0  # short, so the programs that must be stopped keep the file fast
LIMITS = Limits(wall_seconds=WALL)
# Every execution must end within its wall limit + GRACE_SECONDS, where the parent's own kill
# lands if the launcher has not finished by then; SLACK covers that kill and the reaping.
SLACK = 0.1

ADD = Problem(
    id="add",
    prompt="Write add(a, b).",
    metadata={
        "tests": ["assert add(1, 2) == 3", "assert add(-4, 4) == 0", "assert add(10, 5) == 15"]
    },
)
SUM = Problem(
    id="sum",
    prompt="Print the sum of two integers read from stdin.",
    metadata={
        "tests": [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}]
    },
)
# Solves both: the harness imports it as a module, the stdio tests run it as __main__.
HONEST = """
def add(a, b):
    return a + b

if __name__ == "__main__":
    print(sum(map(int, input().split())))
"""


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def sandbox_processes(mountpoints: set[str]) -> list[int]:
    """Live processes whose root is one of these sandboxes' chroots: exactly what they run."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/root") in mountpoints:
                    found.append(int(entry))
            except OSError:
                continue  # it exited while we looked
    return found


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every file and directory under the roots: kind, size, mtime and content hash."""
    state = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
            state[str(path)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return state


@pytest.fixture(scope="module")
def sandbox(skip_without_namespaces):
    try:
        box = Sandbox(LIMITS, workers=16)
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    yield box
    box.close()


def run(sandbox: Sandbox, code: str, stdin: str = "", **limits) -> Execution:
    execution = sandbox.run_python(textwrap.dedent(code), stdin, LIMITS.model_copy(update=limits))
    wall = limits.get("wall_seconds", WALL)
    assert execution.wall_seconds < wall + GRACE_SECONDS + SLACK, execution
    assert execution.error is None, execution
    return execution


# ---------------------------------------------------------------------------------------------
# Basic behaviour


def test_stdin_to_stdout(sandbox):
    result = run(sandbox, "import sys\nprint(sys.stdin.read().upper(), end='')", "hello\nworld\n")
    assert result.ok and result.stdout == "HELLO\nWORLD\n" and result.returncode == 0


@pytest.mark.parametrize(
    ("code", "returncode"),
    [
        ("pass", 0),
        ("raise SystemExit(3)", 3),
        ("import os; os._exit(7)", 7),
        ("1 / 0", 1),
        ("import ctypes; ctypes.string_at(0)", -signal.SIGSEGV),
    ],
    ids=["clean", "sys-exit", "os-exit", "exception", "segfault"],
)
def test_exit_codes(sandbox, code, returncode):
    result = run(sandbox, code)
    assert result.returncode == returncode
    assert result.ok == (returncode == 0)
    assert not result.timed_out


@pytest.mark.parametrize(
    "code", ["while True: pass", "import time; time.sleep(60)"], ids=["busy", "sleeping"]
)
def test_wall_clock_limit(sandbox, code):
    start = time.monotonic()
    result = run(sandbox, code, wall_seconds=1.0)
    assert result.timed_out and not result.ok
    assert result.returncode == -signal.SIGKILL
    assert time.monotonic() - start < 1.0 + GRACE_SECONDS + SLACK


def test_cpu_limit(sandbox):
    # A wall limit far away, so only the CPU limit can stop the loop.
    result = run(sandbox, "while True: pass", cpu_seconds=1.0, wall_seconds=20.0)
    assert result.timed_out and not result.ok
    assert result.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
    assert 1.0 <= result.cpu_seconds < 3.0


def test_output_limit(sandbox):
    result = run(sandbox, "while True: print('x' * 1000)", max_output_kb=64)
    assert result.output_limited and not result.ok
    assert len(result.stdout) <= 64 << 10


def test_memory_limit(sandbox):
    result = run(sandbox, "x = bytearray(1 << 30)", memory_mb=256)
    assert result.returncode == 1 and "MemoryError" in result.stderr


def test_file_size_limit(sandbox):
    code = """
        import os
        try:
            with open("big", "wb") as f:
                for _ in range(4):
                    f.write(bytes(1 << 20))
        except OSError as e:
            print("refused", e.errno, os.path.getsize("big"))
    """
    result = run(sandbox, code, max_file_mb=1)
    assert result.stdout.split() == ["refused", "27", str(1 << 20)]  # EFBIG at exactly 1 MiB


def test_environment_is_clean(sandbox, monkeypatch):
    monkeypatch.setenv("RLVR_SANDBOX_CANARY", "canary-value-7d1f")
    result = run(sandbox, "import os; print(sorted(os.environ.items()))")
    assert "canary-value-7d1f" not in result.stdout
    expected = {"HOME": "/tmp/work", "LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"}
    expected |= {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert ast.literal_eval(result.stdout) == sorted(expected.items())


def test_work_directory_is_fresh_per_run(sandbox):
    write = "import os; open('left.txt', 'w').write('x'); open('/tmp/left.txt', 'w').write('x')"
    assert run(sandbox, write).ok
    check = "import os; print(os.getcwd(), os.listdir('.'), os.path.exists('/tmp/left.txt'))"
    assert run(sandbox, check).stdout.split() == ["/tmp/work", "['main.py']", "False"]


# ---------------------------------------------------------------------------------------------
# Hostile programs. Every program starts with CTX = {...} (paths, ports, pids, the marker; never
# a secret value). None of them solves ADD or SUM, so each must score 0 on both.

PRELUDE = "import os, sys, socket, time, signal\nCTX = {ctx!r}\n"

FORGE = """
import re
def forge(candidates):
    for secret in candidates:
        for i in range(10):
            print(f"{secret} {i} pass", flush=True)
def add(a, b):
    return None
"""

HOSTILE = {
    # Resource exhaustion
    "fork-bomb": """
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """,
    "shell-fork-bomb": """
        os.execv("/bin/sh", ["sh", "-c", "f() { f | f & }; f"])
    """,
    "infinite-loop": "while True: pass",
    "sleep-forever": "time.sleep(10**6)",
    "memory-bomb-huge": """
        x = bytearray(10**12)
        print("ESCAPED allocated 1 TB")
    """,
    "memory-bomb-gradual": """
        chunks = []
        while True:
            chunks.append(bytes(64 << 20))  # calloc: address space without the CPU to fill it
    """,
    "memory-bomb-mmap": """
        import mmap
        m = mmap.mmap(-1, 8 << 30)
        m[-1] = 1
        print("ESCAPED mapped 8 GB")
    """,
    "file-10gb": """
        with open("big", "wb") as f:
            for _ in range(10 << 10):
                f.write(bytes(1 << 20))
        print("ESCAPED wrote 10 GB")
    """,
    "file-10gb-sparse": """
        with open("sparse", "wb") as f:
            f.seek(10 << 30)
            f.write(b"x")
        print("ESCAPED sparse 10 GB")
    """,
    "tmp-fill": """
        for i in range(100):
            with open(f"/tmp/fill{i}", "wb") as f:
                f.write(bytes(15 << 20))
    """,
    "threads-bomb": """
        import threading
        while True:
            threading.Thread(target=time.sleep, args=(1000,)).start()
    """,
    "fd-exhaustion": """
        fds = []
        try:
            while True:
                fds.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        if len(fds) > 64:
            print("ESCAPED opened", len(fds))
        while True:
            pass
    """,
    "huge-stdout": """
        while True:
            sys.stdout.write("x" * 65536)
    """,
    "huge-stderr": """
        while True:
            sys.stderr.write("y" * 65536)
    """,
    "deep-recursion": """
        sys.setrecursionlimit(10**8)
        def f(n):
            return f(n + 1) + 1
        f(0)
    """,
    # Writing outside the work directory
    "write-host-tmp": """
        with open(f"/tmp/{CTX['marker']}-tmp", "w") as f:
            f.write("x")  # lands in the private /tmp: the test checks the host's
    """,
    "write-test-dirs": """
        for path in (CTX["watched"] + "/new-" + CTX["marker"], CTX["canary"], CTX["home"] + "/x"):
            try:
                with open(path, "a") as f:
                    f.write("ESCAPED")
                print("ESCAPED wrote", path)
            except OSError as e:
                print("refused", path, e)
    """,
    "write-home-etc-repo": """
        for d in (CTX["real_home"], "/etc", CTX["repo"], CTX["venv"], "/usr/lib", "/"):
            path = d.rstrip("/") + "/" + CTX["marker"]
            try:
                open(path, "w").close()
                print("ESCAPED created", path)
            except OSError as e:
                print("refused", path, e)
        for path in ("/etc/passwd", CTX["repo"] + "/pyproject.toml"):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_APPEND))  # opened, never written
                print("ESCAPED writable", path)
            except OSError as e:
                print("refused", path, e)
    """,
    "write-dev": """
        import stat
        for attempt in (
            lambda: open("/dev/" + CTX["marker"], "w"),
            lambda: open("/dev/sda", "wb"),
            lambda: os.mknod("blk", stat.S_IFBLK | 0o600, os.makedev(8, 0)),
            lambda: os.mknod("/dev/mem2", stat.S_IFCHR | 0o600, os.makedev(1, 1)),
        ):
            try:
                attempt()
                print("ESCAPED /dev")
            except OSError as e:
                print("refused", e)
    """,
    "orphan-setsid": """
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(1.5)
                for path in (CTX["watched"] + "/orphan-" + CTX["marker"], f"/tmp/{CTX['marker']}-orphan"):
                    try:
                        open(path, "w").close()
                    except OSError:
                        pass
                print("ESCAPED orphan lived", flush=True)
            os._exit(0)
        print("parent leaves")
    """,
    "orphan-stopped": """
        if os.fork() == 0:
            os.kill(os.getpid(), signal.SIGSTOP)
            print("ESCAPED stopped child resumed", flush=True)
            os._exit(0)
        time.sleep(0.2)
    """,
    "orphan-shell-background": """
        os.system("(sleep 2; echo ESCAPED background; touch /tmp/" + CTX["marker"] + "-bg) &")
        print("parent leaves")
    """,
    "ignore-signals-loop": """
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGHUP, signal.SIGXCPU):
            signal.signal(s, signal.SIG_IGN)
        while True:
            pass
    """,
    # Secrets
    "read-env-secrets": """
        print(dict(os.environ))
        print(os.environ.get(CTX["env_name"]))
        for path in ("/proc/self/environ", "/proc/1/environ"):
            print(open(path, "rb").read())
    """,
    "read-home-secrets": """
        for path in (CTX["secret_file"], os.path.expanduser("~/.ssh/id_rsa"), CTX["home"] + "/.ssh/id_rsa"):
            try:
                print(path, open(path).read())
            except OSError as e:
                print("refused", path, e)
        for path in (CTX["real_home"] + "/.bash_history", CTX["real_home"] + "/.ssh"):
            print("ESCAPED sees" if os.path.exists(path) else "hidden", path)
    """,
    "read-etc-shadow": """
        try:
            open("/etc/shadow").read()
            print("ESCAPED read /etc/shadow")
        except OSError as e:
            print("refused", e)
    """,
    "proc-snooping": """
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        print("pids", pids)
        for pid in pids:
            print(pid, open(f"/proc/{pid}/cmdline", "rb").read(), open(f"/proc/{pid}/environ", "rb").read())
        for pid in (CTX["test_pid"], CTX["sentinel_pid"]):
            if os.path.exists(f"/proc/{pid}"):
                print("ESCAPED sees host pid", pid, open(f"/proc/{pid}/environ", "rb").read())
        if pids != [1]:
            print("ESCAPED sees other processes")
    """,
    "proc-sys-write": """
        for path in ("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"):
            try:
                os.close(os.open(path, os.O_WRONLY))  # opened, never written
                print("ESCAPED writable", path)
            except OSError as e:
                print("refused", path, e)
    """,
    # Network: the test listens on each of these
    "net-tcp": """
        try:
            socket.create_connection(("127.0.0.1", CTX["tcp_port"]), timeout=1)
            print("ESCAPED tcp")
        except OSError as e:
            print("refused", e)
    """,
    "net-tcp6": """
        try:
            socket.create_connection(("::1", CTX["tcp6_port"]), timeout=1)
            print("ESCAPED tcp6")
        except OSError as e:
            print("refused", e)
    """,
    "net-udp": """
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(3):
            try:
                s.sendto(b"ESCAPED udp", ("127.0.0.1", CTX["udp_port"]))
            except OSError as e:
                print("refused", e)
    """,
    "net-abstract-unix": """
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect("\\0" + CTX["abstract"])
            print("ESCAPED abstract unix socket")
        except OSError as e:
            print("refused", e)
    """,
    "net-filesystem-unix": """
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(CTX["unix_path"])
            print("ESCAPED unix socket")
        except OSError as e:
            print("refused", e)
    """,
    "net-outside": """
        for address in (("1.1.1.1", 53), ("8.8.8.8", 443)):
            try:
                socket.create_connection(address, timeout=1)
                print("ESCAPED internet")
            except OSError as e:
                print("refused", e)
        print([name for _, name in socket.if_nameindex()])
    """,
    "net-raw-socket": """
        for family, kind, proto in ((socket.AF_PACKET, socket.SOCK_RAW, 0), (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)):
            try:
                socket.socket(family, kind, proto)
                print("ESCAPED raw socket")
            except OSError as e:
                print("refused", e)
    """,
    # Signals
    "kill-parent": """
        for pid in (os.getppid(), CTX["test_pid"], CTX["sentinel_pid"]):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError as e:
                print("refused", pid, e)
        print("still here")
    """,
    "kill-everything": """
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError as e:
            print("refused", e)
        for pid in range(2, 4000):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    """,
    "killpg": """
        for group in (os.getpgid(0), CTX["test_pgid"]):
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError as e:
                print("refused", group, e)
    """,
    # Privilege and escape
    "setuid-root": """
        for attempt in (lambda: os.setuid(0), lambda: os.setresuid(0, 0, 0), lambda: os.setgroups([0])):
            try:
                attempt()
                print("ESCAPED root")
            except OSError as e:
                print("refused", e)
        import resource
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            print("ESCAPED raised a hard limit")
        except (OSError, ValueError) as e:
            print("refused", e)
    """,
    "ptrace-attach": """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        for pid in (CTX["test_pid"], CTX["sentinel_pid"], 1):
            if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
                print("ESCAPED ptrace", pid)
            else:
                print("refused", pid, os.strerror(ctypes.get_errno()))
    """,
    "mount-and-unshare": """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        os.mkdir("m")
        if libc.mount(b"tmpfs", b"m", b"tmpfs", 0, None) == 0:
            print("ESCAPED mount")
        if libc.mount(None, b"/", None, 32, None) == 0:  # MS_REMOUNT read-write
            print("ESCAPED remount")
        for flags in (0x10000000, 0x00020000, 0x40000000):  # user, mount, network namespaces
            if libc.unshare(flags) == 0:
                print("ESCAPED unshare", hex(flags))
        print("errno", os.strerror(ctypes.get_errno()))
    """,
    "chroot-escape": """
        os.mkdir("jail")
        try:
            os.chroot("jail")
            print("ESCAPED chroot")
            for _ in range(20):
                os.chdir("..")
            os.chroot(".")
        except OSError as e:
            print("refused", e)
        for path in (CTX["host_marker"], "/proc/1/root" + CTX["host_marker"], "/proc/self/root/../../" + CTX["host_marker"]):
            if os.path.exists(path):
                print("ESCAPED sees", path)
    """,
    "symlink-tricks": """
        os.symlink("/etc/passwd", "passwd")
        os.symlink(CTX["watched"], "watched")
        os.symlink("/", "root")
        for path in ("passwd", "watched/via-link-" + CTX["marker"], "root/etc/" + CTX["marker"]):
            try:
                with open(path, "a") as f:
                    f.write("ESCAPED")
                print("ESCAPED wrote through", path)
            except OSError as e:
                print("refused", path, e)
        try:
            os.link("/etc/passwd", "hard")
            print("ESCAPED hard link")
        except OSError as e:
            print("refused", e)
    """,
    "segfault": """
        import ctypes
        ctypes.string_at(0)
    """,
    # Gaming the reward
    "os-exit-before-asserts": """
        def add(a, b):
            os._exit(0)
        os._exit(0)
    """,
    "sys-exit-zero": """
        def add(a, b):
            return None
        sys.exit(0)
    """,
    "fake-pass-lines": """
        def add(a, b):
            return None
        for i in range(5):
            print(f"{i} pass")
            print(f"{os.urandom(16).hex()} {i} pass")
        print("PASS\\nok\\nAll tests passed\\n5\\n6")
    """,
    "patched-unittest": """
        import unittest
        unittest.TestCase.assertEqual = lambda *a, **k: None
        unittest.TestCase.run = lambda self, result=None: result
        unittest.main = lambda *a, **k: print("OK")
        def add(a, b):
            return None
    """,
    "always-equal": """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
    """,
    "patched-builtins": """
        import builtins
        builtins.exec = lambda *a, **k: None
        builtins.isinstance = lambda *a: True
        def add(a, b):
            return None
    """,
    "secret-via-frames": FORGE
    + textwrap.dedent("""
        def add(a, b):
            f = sys._getframe()
            while f is not None:
                forge(v for v in f.f_locals.values() if isinstance(v, str) and re.fullmatch("[0-9a-f]{32}", v))
                f = f.f_back
    """),
    "secret-via-proc-mem": FORGE
    + textwrap.dedent("""
        found = set()
        mem = open("/proc/self/mem", "rb", buffering=0)
        for line in open("/proc/self/maps"):
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if perms.startswith("rw") and hi - lo < 1 << 26:
                try:
                    mem.seek(lo)
                    found |= set(re.findall(rb"[0-9a-f]{32}", mem.read(hi - lo)))
                except OSError:
                    pass
        forge(s.decode() for s in found)
    """),
}
HOSTILE = {name: textwrap.dedent(code) for name, code in HOSTILE.items()}

# The user-namespace path gets the attacks whose containment differs between the two paths.
USERNS_SUBSET = (
    "net-tcp",
    "net-udp",
    "net-abstract-unix",
    "net-filesystem-unix",
    "write-test-dirs",
    "write-home-etc-repo",
    "read-env-secrets",
    "read-home-secrets",
    "orphan-setsid",
    "kill-everything",
    "proc-sys-write",
)


def test_the_corpus_is_large_and_distinct():
    assert len(HOSTILE) >= 40
    assert len(set(HOSTILE.values())) == len(HOSTILE)
    assert set(USERNS_SUBSET) <= set(HOSTILE)


@dataclass
class World:
    """What the test sets up around the sandbox, and what it saw after the corpus ran."""

    ctx: dict
    secrets: tuple[str, ...]
    listeners: dict[str, socket.socket]
    watched: tuple[Path, ...]
    sentinel: subprocess.Popen
    before: dict = field(default_factory=dict)
    tmp_before: set[str] = field(default_factory=set)

    def connections(self) -> list[str]:
        """Listeners that got a connection or a datagram."""
        seen = []
        for name, sock in self.listeners.items():
            try:
                if sock.type == socket.SOCK_DGRAM:
                    sock.recvfrom(65536)
                else:
                    sock.accept()
                seen.append(name)
            except BlockingIOError:
                pass
        return seen

    def outside_changes(self) -> list[str]:
        now = snapshot(*self.watched)
        changed = sorted(
            k for k in self.before.keys() | now.keys() if self.before.get(k) != now.get(k)
        )
        marker = self.ctx["marker"]
        # The whole /tmp listing is not compared: other users of this machine change it. Every
        # name a program could create there carries the marker.
        created = [f"/tmp/{n}" for n in set(os.listdir("/tmp")) - self.tmp_before if marker in n]
        elsewhere = [
            p
            for d in (self.ctx["real_home"], "/etc", self.ctx["repo"], self.ctx["venv"], "/usr/lib")
            if os.path.exists(p := f"{d.rstrip('/')}/{marker}")
        ]
        return changed + created + elsewhere


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("world")
    watched, home = base / "watched", base / "home"
    (home / ".ssh").mkdir(parents=True)
    watched.mkdir()
    env_secret = f"env-secret-{secrets.token_hex(8)}"
    home_secret = f"home-secret-{secrets.token_hex(8)}"
    (home / ".ssh" / "id_rsa").write_text(home_secret)
    (watched / "canary.txt").write_text("unchanged")
    host_marker = Path("/tmp") / f"rlvr-host-marker-{secrets.token_hex(4)}"
    host_marker.write_text("on the host only")

    listeners = {}
    tcp = socket.create_server(("127.0.0.1", 0))
    listeners["tcp"] = tcp
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    listeners["udp"] = udp
    try:
        listeners["tcp6"] = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pass  # no IPv6 loopback here; the program's attempt is still made
    abstract = f"rlvr-test-{secrets.token_hex(6)}"
    listeners["abstract"] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listeners["abstract"].bind("\0" + abstract)
    unix_path = base / "l.sock"
    listeners["unix"] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listeners["unix"].bind(str(unix_path))
    for sock in listeners.values():
        if sock.type == socket.SOCK_STREAM:
            sock.listen()
        sock.setblocking(False)

    sentinel = subprocess.Popen(["sleep", "300"], start_new_session=True)
    ctx = {
        "marker": f"rlvr-escape-{secrets.token_hex(6)}",
        "watched": str(watched),
        "canary": str(watched / "canary.txt"),
        "home": str(home),
        "secret_file": str(home / ".ssh" / "id_rsa"),
        "env_name": "RLVR_SANDBOX_TEST_SECRET",
        "real_home": os.path.expanduser("~"),
        "repo": str(REPO),
        "venv": sys.prefix,
        "host_marker": str(host_marker),
        "test_pid": os.getpid(),
        "test_pgid": os.getpgid(0),
        "sentinel_pid": sentinel.pid,
        "tcp_port": listeners["tcp"].getsockname()[1],
        "tcp6_port": listeners["tcp6"].getsockname()[1] if "tcp6" in listeners else 1,
        "udp_port": listeners["udp"].getsockname()[1],
        "abstract": abstract,
        "unix_path": str(unix_path),
    }
    saved_env = {k: os.environ.get(k) for k in ("HOME", ctx["env_name"])}
    os.environ.update({"HOME": str(home), ctx["env_name"]: env_secret})
    world = World(ctx, (env_secret, home_secret), listeners, (watched, home), sentinel)
    world.before = snapshot(*world.watched)
    world.tmp_before = set(os.listdir("/tmp"))
    yield world
    for key, value in saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    for sock in listeners.values():
        sock.close()
    sentinel.kill()
    sentinel.wait()
    host_marker.unlink()


@dataclass
class Outcome:
    direct: dict[str, Execution]
    scores: dict[str, dict[str, Score]]
    reward_executions: list[Execution]
    connections: list[str]
    outside_changes: list[str]
    survivors: list[int]
    seconds: float


def run_corpus(world: World, sandbox: Sandbox, reward: CodeTests, names) -> Outcome:
    """Each program alone (16 at a time on the sandbox's pool) and scored on ADD and SUM."""
    programs = {name: PRELUDE.format(ctx=world.ctx) + HOSTILE[name] for name in names}
    reward_executions: list[Execution] = []  # list.append is atomic: filled from many threads
    plain_run = reward.sandbox.run

    def recorded_run(*args, **kwargs):
        reward_executions.append(execution := plain_run(*args, **kwargs))
        return execution

    reward.sandbox.run = recorded_run
    start = time.monotonic()
    try:
        direct = {name: sandbox.submit(sandbox.run_python, code) for name, code in programs.items()}
        # Another pool for the reward calls: they wait on the reward's own sandbox pool.
        with ThreadPoolExecutor(8) as pool:
            scored = {
                name: {p.id: pool.submit(reward, p, code) for p in (ADD, SUM)}
                for name, code in programs.items()
            }
            direct = {name: f.result() for name, f in direct.items()}
            scores = {name: {k: f.result() for k, f in s.items()} for name, s in scored.items()}
    finally:
        reward.sandbox.run = plain_run
    seconds = time.monotonic() - start
    mountpoints = {sandbox._mountpoint, reward.sandbox._mountpoint}  # private: tests only
    # Executions return only after their PID namespace is gone; allow the kernel a moment.
    wait_until(lambda: not sandbox_processes(mountpoints), 5.0)
    return Outcome(
        direct=direct,
        scores=scores,
        reward_executions=reward_executions,
        connections=world.connections(),
        outside_changes=world.outside_changes(),
        survivors=sandbox_processes(mountpoints),
        seconds=seconds,
    )


@pytest.fixture(scope="module")
def reward(sandbox):
    params = CodeTests.Params(limits=LIMITS, workers=16)
    code_tests = CodeTests(params)
    yield code_tests
    code_tests.sandbox.close()


@pytest.fixture(scope="module")
def outcome(world, sandbox, reward) -> Outcome:
    # The reward must be able to give credit, or scoring 0 would prove nothing.
    assert reward(ADD, HONEST) == Score(1.0, "ok", {"passed": 3, "total": 3, "weak_tests": 0})
    assert reward(SUM, HONEST) == Score(1.0, "ok", {"passed": 2, "total": 2, "weak_tests": 0})
    return run_corpus(world, sandbox, reward, HOSTILE)


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_program_is_contained_and_scores_zero(outcome, world, name):
    execution = outcome.direct[name]
    assert execution.error is None
    assert execution.wall_seconds < WALL + GRACE_SECONDS + SLACK
    output = execution.stdout + execution.stderr
    assert "ESCAPED" not in output
    assert not any(secret in output for secret in world.secrets)
    assert outcome.scores[name]["add"].value == 0.0, outcome.scores[name]
    assert outcome.scores[name]["sum"].value == 0.0, outcome.scores[name]


def test_corpus_left_nothing_behind(outcome, world):
    assert outcome.connections == []
    assert outcome.outside_changes == []
    assert outcome.survivors == []
    assert world.sentinel.poll() is None  # os.kill(-1) and friends reached nothing outside
    for execution in outcome.reward_executions:
        assert execution.error is None
        assert execution.wall_seconds < WALL + GRACE_SECONDS + SLACK
        output = execution.stdout + execution.stderr
        assert "ESCAPED" not in output
        assert not any(secret in output for secret in world.secrets)
    assert len(outcome.reward_executions) == 3 * len(HOSTILE)  # one assert run, two stdio runs


# Programs whose attack ends in an uncaught exception by design.
EXPECTED_TRACEBACKS = {
    "memory-bomb-huge",
    "memory-bomb-gradual",
    "memory-bomb-mmap",
    "file-10gb",
    "file-10gb-sparse",
    "tmp-fill",
    "threads-bomb",
    "deep-recursion",
    "fork-bomb",
    "secret-via-proc-mem",
    "huge-stderr",
    "read-env-secrets",  # no /proc to read
    "proc-snooping",
}


# The corpus's programs aimed at the wall clock; every other one meets its own limit first.
MEANT_TO_TIME_OUT = ("infinite-loop", "sleep-forever", "ignore-signals-loop", "threads-bomb")


def alone_if_starved(direct: dict, sandbox: Sandbox, world: World) -> dict:
    """Each program aimed at a limit other than the wall clock that timed out having run almost
    no CPU (starved among the corpus's bombs, 16 at a time on 2 cores: seen for a printed
    verdict and for huge-stdout) runs again alone, so the limit it targets can be checked."""
    out = dict(direct)
    for name, execution in direct.items():
        starved = execution.timed_out and execution.cpu_seconds < 0.5
        if starved and name not in MEANT_TO_TIME_OUT:
            out[name] = sandbox.run_python(PRELUDE.format(ctx=world.ctx) + HOSTILE[name])
    return out


def test_corpus_attacks_met_the_limits_they_target(outcome, sandbox, world):
    """Spot checks that the programs did what they meant to and were stopped by the right
    limit, so a program that merely crashed on a typo cannot pass for contained."""
    d = alone_if_starved(outcome.direct, sandbox, world)
    for name in MEANT_TO_TIME_OUT:
        assert d[name].timed_out, name
    assert d["huge-stdout"].output_limited and d["huge-stderr"].output_limited
    assert "MemoryError" in d["memory-bomb-huge"].stderr
    assert "MemoryError" in d["memory-bomb-gradual"].stderr
    assert "File too large" in d["file-10gb"].stderr
    assert "No space left on device" in d["tmp-fill"].stderr
    assert d["segfault"].returncode == -signal.SIGSEGV
    assert (
        "FileNotFoundError: [Errno 2] No such file or directory: '/proc'"
        in d["proc-snooping"].stderr
    )
    assert d["kill-parent"].stdout.rstrip().endswith("still here")
    assert "Network is unreachable" in d["net-tcp"].stdout
    assert d["write-test-dirs"].stdout.count("refused") == 3
    assert d["write-home-etc-repo"].stdout.count("refused") == 8
    assert "refused" in d["read-etc-shadow"].stdout
    assert d["orphan-setsid"].stdout == "parent leaves\n"
    assert "['lo']" in d["net-outside"].stdout
    for name, execution in d.items():
        assert "Traceback" not in execution.stderr or name in EXPECTED_TRACEBACKS, name


# ---------------------------------------------------------------------------------------------
# No isolation backend: the sandbox refuses to exist

REFUSAL_CHILD = """
from rlvr.rewards.code import CodeTests
from rlvr.rewards.sandbox import Sandbox, SandboxUnavailableError
for build in (Sandbox, CodeTests):
    try:
        build()
        print(build.__name__, "STARTED")
    except SandboxUnavailableError as e:
        print(build.__name__, "refused:", e)
"""


def test_sandbox_refuses_to_start_without_namespaces():
    """Inside a user namespace whose max_user_namespaces is 0 the launcher cannot create the
    namespaces it needs: building a Sandbox or a CodeTests must fail and say how to fix it."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -c "$1"'
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", script, sys.executable, REFUSAL_CHILD],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    if "unshare failed" in result.stderr:
        # No user namespaces for this process at all: then the sandbox must refuse right here,
        # unless it is root and needs none.
        try:
            Sandbox().close()
        except SandboxUnavailableError as e:
            assert "Fix:" in str(e)
            return
        pytest.skip(f"unshare cannot create a user namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines] == [
        ["Sandbox", "refused:"],
        ["CodeTests", "refused:"],
    ]
    for line in lines:
        assert "cannot isolate programs" in line and "Fix:" in line
        assert "user.max_user_namespaces" in line


# ---------------------------------------------------------------------------------------------
# The user-namespace path (what non-root users get), forced even when running as root


def test_user_namespace_path_contains_the_attacks(world, skip_without_namespaces):
    try:
        box = Sandbox(LIMITS, workers=16, user_namespace=True)
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    userns_reward = CodeTests(CodeTests.Params(limits=LIMITS, workers=16))
    userns_reward.sandbox.close()
    userns_reward.sandbox = Sandbox(LIMITS, workers=16, user_namespace=True)
    try:
        probe = box.run_python("import os; print(os.getuid())")
        assert probe.stdout.strip() == "1000"  # the launcher's uid inside its user namespace
        assert userns_reward(ADD, HONEST).value == 1.0
        outcome = run_corpus(world, box, userns_reward, USERNS_SUBSET)
    finally:
        box.close()
        userns_reward.sandbox.close()
    assert outcome.connections == []
    assert outcome.outside_changes == []
    assert outcome.survivors == []
    assert world.sentinel.poll() is None
    for name in USERNS_SUBSET:
        execution = outcome.direct[name]
        output = execution.stdout + execution.stderr
        assert "ESCAPED" not in output, (name, output)
        assert not any(secret in output for secret in world.secrets), name
        assert execution.wall_seconds < WALL + GRACE_SECONDS + SLACK, name
        assert {s.value for s in outcome.scores[name].values()} == {0.0}, name
    for execution in outcome.reward_executions:
        assert "ESCAPED" not in execution.stdout + execution.stderr


@pytest.mark.parametrize("user_namespace", [False, True], ids=["root-path", "userns-path"])
def test_a_bound_directory_under_the_host_tmp_is_visible_read_only(
    user_namespace, tmp_path, monkeypatch, skip_without_namespaces
):
    # A venv or checkout under /tmp (as on CI runners) is bound inside the private /tmp.
    shared = tmp_path / "venv"
    shared.mkdir()
    (shared / "lib.txt").write_text("from the host")
    original = Sandbox._bind_paths
    monkeypatch.setattr(Sandbox, "_bind_paths", lambda self: original(self) + [str(shared)])
    try:
        box = Sandbox(LIMITS, workers=2, user_namespace=user_namespace)
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    try:
        result = box.run_python(
            f"print(open({str(shared / 'lib.txt')!r}).read())\n"
            "open('/tmp/scratch', 'w').write('ok')\n"
            "import os\n"
            f"parent = {str(shared.parent)!r}\n"
            "try:\n"
            "    open(os.path.join(parent, 'beside.txt'), 'w')\n"
            "    print('wrote beside the bind')\n"
            "except OSError as e:\n"
            "    print('refused beside:', e)\n"
            f"open({str(shared / 'new.txt')!r}, 'w')\n"
        )
    finally:
        box.close()
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "from the host"
    assert lines[1].startswith("refused beside:")  # the directories holding the bind too
    assert "Read-only file system" in result.stderr
    assert not (shared / "new.txt").exists()
