"""Run untrusted (model-written) programs isolated: namespaces, chroot, cgroups, rlimits, a wall clock.

Every execution gets fresh mount, network, PID, IPC and UTS namespaces (and a user namespace
when not root), a fresh empty session keyring, a chroot of read-only binds (system directories
and the standard library; installed packages only when named) with a private size-limited /tmp
and no /proc, a clean environment, a cgroup capping the memory and processes of the whole
execution where the kernel lets us create one, limits per process on CPU, memory, processes,
file size and open files, and a wall-clock limit after which its whole PID namespace is killed.
The isolation is checked when a Sandbox is built; if it cannot be established the Sandbox
refuses to exist, so nothing ever runs unsandboxed. `submit` runs executions on a thread pool.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import selectors
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlvr.rewards.sandbox_cgroup import CgroupCap

logger = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
SYSTEM_BINDS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Time the launcher gets beyond the wall limit to kill, reap and report before we kill it.
GRACE_SECONDS = 2.0


class SandboxUnavailableError(RuntimeError):
    """The configured isolation cannot be established here; rlvr will not run code without it."""


class Limits(BaseModel):
    """Resource limits for one execution."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_seconds: float = Field(
        10.0, gt=0, description="Wall-clock limit; then everything is killed."
    )
    cpu_seconds: float = Field(5.0, gt=0, description="CPU-time limit per process.")
    memory_mb: int = Field(
        512,
        gt=0,
        description="Memory of the whole execution, in MiB: a cgroup cap on all its processes "
        "together where the kernel allows one, and always an address-space limit per process.",
    )
    max_processes: int = Field(
        32, gt=0, description="Processes (and threads) the program may run, all together."
    )
    max_file_mb: int = Field(16, gt=0, description="Largest file the program may write, in MiB.")
    max_open_files: int = Field(64, gt=3, description="Open file descriptors per process.")
    disk_mb: int = Field(32, gt=0, description="Size of the private writable /tmp, in MiB.")
    max_output_kb: int = Field(
        1024, gt=0, description="Captured stdout + stderr; past it the run is killed."
    )


@dataclass
class Execution:
    """What happened to one program. `error` is set only when the sandbox itself failed."""

    returncode: int | None  # negative: killed by that signal
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False  # past the wall-clock or the CPU limit
    output_limited: bool = False
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    error: str | None = None
    memory_cap: str = "rlimit"  # "cgroup": memory and processes capped for the whole execution
    oom_killed: bool = False  # the cgroup's memory cap killed one of its processes

    @property
    def ok(self) -> bool:
        limited = self.timed_out or self.output_limited or self.oom_killed
        return self.returncode == 0 and not (limited or self.error)


class Sandbox:
    """Isolated execution of Python programs, checked at construction; `run` is thread-safe.

    Programs see the standard library only, unless `packages` names installed top-level
    packages, which are then bound read-only with the distributions they depend on. Memory and
    processes are capped per execution by a cgroup where one can be created here
    (`memory_cap == "cgroup"`), else per process by rlimits alone (`"rlimit"`, with the reason
    in `memory_cap_reason`)."""

    def __init__(
        self,
        limits: Limits | None = None,
        workers: int = 16,
        python: str = sys.executable,
        user_namespace: bool = False,
        packages: Sequence[str] = (),
    ):
        self.limits = limits or Limits()
        # The base interpreter, not a venv's: the venv's packages stay outside the sandbox.
        self.python = os.path.realpath(python)
        self.user_namespace = user_namespace  # force the unprivileged path even as root
        self.packages = list(packages)
        package_dirs, self._pythonpath = resolve_packages(self.packages)
        # One empty directory every execution mounts its private root on, in its own namespace.
        self._mountpoint = tempfile.mkdtemp(prefix="rlvr-sandbox-")
        os.chmod(self._mountpoint, 0o755)
        self._cgroup, self.memory_cap_reason = CgroupCap.create()
        self.memory_cap = "cgroup" if self._cgroup else "rlimit"
        self._cleanup = weakref.finalize(
            self, _remove, self._mountpoint, self._cgroup.close if self._cgroup else None
        )
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="sandbox")
        self._binds = self._bind_paths() + package_dirs
        self._masks = _site_packages()
        self._check_isolation()

    def _bind_paths(self) -> list[str]:
        """System directories, the interpreter, its shared library and the standard library."""
        paths = {str(Path(self.python).parent), os.path.dirname(os.__file__)}
        dynload = sysconfig.get_config_var("DESTSHARED")
        library = os.path.join(
            sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or ""
        )
        paths |= {p for p in (dynload, library) if p and os.path.exists(p)}
        return list(SYSTEM_BINDS) + sorted(paths)

    def run(
        self,
        files: Mapping[str, str],
        argv: Sequence[str],
        stdin: str = "",
        limits: Limits | None = None,
    ) -> Execution:
        """Write `files` into a fresh work directory and run `argv` there ("python" means the
        sandbox's interpreter, without site-packages)."""
        limits = limits or self.limits
        if argv[0] == "python":
            # -I would ignore PYTHONPATH, which is how named packages are found.
            flags = ["-s", "-S"] if self._pythonpath else ["-I", "-S"]
            argv = [self.python, *flags, *argv[1:]]
        spec = {
            "mountpoint": self._mountpoint,
            "binds": self._binds,
            "masks": self._masks,
            "pythonpath": self._pythonpath,
            "files": dict(files),
            "stdin": stdin,
            "argv": list(argv),
            "limits": limits.model_dump(),
            "user_namespace": self.user_namespace,
            "cgroups": [],
        }
        if self._cgroup is None:
            return _execute(spec, limits)
        try:
            spec["cgroups"] = self._cgroup.execution(limits.memory_mb, limits.max_processes)
        except OSError as e:
            return Execution(None, error=f"cannot create the execution's cgroup: {e}")
        try:
            result = _execute(spec, limits)
            result.memory_cap = "cgroup"
            result.oom_killed = self._cgroup.oom_killed(spec["cgroups"])
            return result
        finally:
            self._cgroup.release(spec["cgroups"])

    def run_python(self, code: str, stdin: str = "", limits: Limits | None = None) -> Execution:
        return self.run({"main.py": code}, ["python", "main.py"], stdin, limits)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """Run `fn(*args)` (typically `self.run`) on the sandbox's worker pool."""
        return self._pool.submit(fn, *args, **kwargs)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._cleanup()

    def _check_isolation(self) -> None:
        marker = Path(self._mountpoint).with_name(Path(self._mountpoint).name + ".marker")
        marker.write_text("host file")
        try:
            probe = _PROBE.format(marker=str(marker), packages=bool(self.packages))
            result = self.run_python(probe)
            if self._cgroup is not None and "cgroup.procs" in (result.error or ""):
                # We may create cgroups here but not move processes into them: rlimits alone.
                self._cgroup.close()
                self._cgroup, self.memory_cap = None, "rlimit"
                self.memory_cap_reason = f"cannot join the execution's cgroup: {result.error}"
                result = self.run_python(probe)
        finally:
            marker.unlink()
        if not result.error and result.memory_cap != self.memory_cap:
            result.error = f"the {self.memory_cap} memory cap was not applied"
        if result.error or result.stdout.strip() != "isolated":
            detail = result.error or (result.stdout + result.stderr).strip()[-500:]
            self.close()
            raise SandboxUnavailableError(
                f"the code sandbox cannot isolate programs on this machine ({detail}). rlvr "
                "never runs model-written code without isolation. Fix: allow user namespaces "
                "(sysctl user.max_user_namespaces=10000, and kernel.unprivileged_userns_clone=1 "
                "where that exists, or kernel.apparmor_restrict_unprivileged_userns=0 on "
                "Ubuntu), or run as root; in containers, grant CAP_SYS_ADMIN or use a "
                "seccomp profile that permits unshare."
            )


# Run inside the sandbox at construction: each line is one property isolation must have.
_PROBE = """
import os, socket, sys
checks = {{
    "not root": os.getuid() != 0,
    "no network but loopback": [n for _, n in socket.if_nameindex()] == ["lo"],
    "host files hidden": not os.path.exists({marker!r}),
    "root read-only": not os.access("/", os.W_OK),
    "alone in its PID namespace": os.getpid() == 1,
    "no /proc": not os.path.exists("/proc/self"),
    "standard library only": not any("-packages" in p for p in sys.path) or {packages},
}}
failed = [name for name, ok in checks.items() if not ok]
print("isolated" if not failed else "not isolated: " + ", ".join(failed))
"""


class SandboxSettings(BaseModel):
    """The settings of a reward that runs model-written code: its limits, pool and packages."""

    model_config = ConfigDict(extra="forbid")

    limits: Limits = Field(default_factory=Limits, description="Sandbox limits per execution.")
    workers: int = Field(16, gt=0, description="Sandbox executions run in parallel.")
    packages: list[str] = Field(
        default_factory=list,
        description="Installed packages the solution may import (top-level names, e.g. "
        '["numpy"]), made visible read-only with their dependencies; by default only the '
        "standard library.",
    )

    def open(self, reward: str) -> Sandbox:
        """The Sandbox these settings describe, warning once when memory is capped per process."""
        sandbox = Sandbox(self.limits, self.workers, packages=self.packages)
        if sandbox.memory_cap != "cgroup":
            logger.warning(
                "%s sandbox: memory is capped per process (rlimits), not per execution: %s",
                reward,
                sandbox.memory_cap_reason,
            )
        return sandbox


def _remove(mountpoint: str, close_cgroup) -> None:
    shutil.rmtree(mountpoint, True)
    if close_cgroup is not None:
        close_cgroup()


def _site_packages() -> list[str]:
    """The base interpreter's site-packages: inside the standard library's binds, hidden."""
    return sorted(p for p in site.getsitepackages([sys.base_prefix]) if os.path.isdir(p))


def resolve_packages(names: Sequence[str]) -> tuple[list[str], str]:
    """(paths to bind, PYTHONPATH) for installed top-level packages and what they depend on.
    A name that is not installed raises ValueError saying so."""
    providers = importlib.metadata.packages_distributions()
    paths: set[str] = set()
    roots: set[str] = set()
    seen: set[str] = set()
    pending = []
    for name in names:
        if name not in providers:
            spec = importlib.util.find_spec(name) if name.isidentifier() else None
            if spec is not None and spec.origin and "-packages" not in spec.origin:
                continue  # the standard library: there already
            raise ValueError(
                f"package {name!r} is not installed for {sys.executable}; install it "
                f"(pip install {name}) or remove it from the sandbox's packages"
            )
        pending += providers[name]
    while pending:
        dist_name = pending.pop()
        key = re.sub(r"[-_.]+", "-", dist_name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed
        root = str(dist.locate_file(""))
        roots.add(root)
        for top in {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] != ".."}:
            paths.add(os.path.join(root, top))
        for requirement in dist.requires or []:
            if "extra ==" not in requirement:  # extras are not installed by default
                pending.append(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0])
    return sorted(p for p in paths if os.path.exists(p)), os.pathsep.join(sorted(roots))


def _execute(spec: dict, limits: Limits) -> Execution:
    start = time.monotonic()
    status_r, status_w = os.pipe()
    spec["status_fd"] = status_w
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCHER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_w,),
            start_new_session=True,
            env={},
        )
    except OSError as e:
        os.close(status_r)
        return Execution(None, error=f"cannot start the sandbox launcher: {e}")
    finally:
        os.close(status_w)
    try:
        process.stdin.write(json.dumps(spec).encode())
        process.stdin.close()
    except BrokenPipeError:
        pass  # the launcher died early; its status pipe says why
    deadline = start + limits.wall_seconds + GRACE_SECONDS
    streams, events, stopped = _collect(process, status_r, limits.max_output_kb << 10, deadline)
    os.close(status_r)
    process.wait()
    result = Execution(
        returncode=None,
        stdout=streams["stdout"].decode(errors="replace"),
        stderr=streams["stderr"].decode(errors="replace"),
        output_limited=stopped == "output",
        timed_out=stopped == "deadline",
        wall_seconds=time.monotonic() - start,
    )
    final = next((e for e in reversed(events) if e["event"] in ("exit", "error")), None)
    if final is not None and final["event"] == "error":
        result.error = final["error"]
    elif final is not None:
        result.returncode = final["returncode"]
        result.cpu_seconds = final["cpu_seconds"]
        out_of_cpu = result.returncode == -signal.SIGXCPU or (
            result.returncode == -signal.SIGKILL and result.cpu_seconds >= limits.cpu_seconds
        )
        result.timed_out = result.timed_out or final["timed_out"] or out_of_cpu
    elif stopped is None:
        result.error = "the sandbox launcher died without reporting"
    return result


def _collect(
    process: subprocess.Popen, status_fd: int, max_output: int, deadline: float
) -> tuple[dict[str, bytes], list[dict], str | None]:
    """Read stdout, stderr and the launcher's status lines until all close. Past `max_output`
    bytes of output, or past the deadline, the run is killed; the third value says which."""
    chunks = {"stdout": bytearray(), "stderr": bytearray(), "status": bytearray()}
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "stdout")
    selector.register(process.stderr, selectors.EVENT_READ, "stderr")
    selector.register(status_fd, selectors.EVENT_READ, "status")
    stopped = None
    while selector.get_map():
        remaining = deadline - time.monotonic()
        ready = selector.select(timeout=remaining) if remaining > 0 else []
        if not ready:
            stopped = "deadline"
            _kill(process, _started_pid(chunks["status"]), signal.SIGKILL)
            break
        for key, _ in ready:
            data = os.read(key.fd, 65536)
            if not data:
                selector.unregister(key.fileobj)
                continue
            chunks[key.data] += data
            if stopped is None and len(chunks["stdout"]) + len(chunks["stderr"]) > max_output:
                stopped = "output"
                _kill(process, _started_pid(chunks["status"]), signal.SIGTERM)
    selector.close()
    events = [json.loads(line) for line in chunks["status"].decode().splitlines() if line]
    return {k: bytes(v[:max_output]) for k, v in chunks.items()}, events, stopped


def _started_pid(status: bytearray) -> int | None:
    for line in status.decode(errors="replace").splitlines():
        event = json.loads(line)
        if event["event"] == "started":
            return event["pid"]
    return None


def _kill(process: subprocess.Popen, program_pid: int | None, launcher_signal: int) -> None:
    """SIGTERM asks the launcher to kill the program's PID namespace and still report; SIGKILL
    to the program's PID 1 kills that namespace directly, in case the launcher cannot."""
    for pid, sig in ((process.pid, launcher_signal), (program_pid, signal.SIGKILL)):
        if pid is not None:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
