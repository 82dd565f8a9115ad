"""The sandbox's launcher: a stdlib-only script that builds the isolation and runs one program.

`rlvr.rewards.sandbox` starts it as `python -I -S sandbox_launcher.py` with a JSON spec on
stdin. It enters new mount, network, PID, IPC and UTS namespaces (plus a user namespace when
not root), forks the program as PID 1 of the new PID namespace, which joins the execution's
cgroups and a fresh empty session keyring, builds a chroot of read-only binds and a size-limited
/tmp (no /proc: it would show the host's mounts and paths), drops privileges, applies rlimits
and execs; the launcher enforces the wall-clock limit and reports JSON lines on a status pipe.
Killing PID 1 of a PID namespace kills every process in it, so nothing the program starts
(forks, `setsid` orphans) outlives the run.
"""

import ctypes
import json
import os
import resource
import select
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
SANDBOX_UID_BASE = 100_000  # root runs each program as its own uid so RLIMIT_NPROC is per run
NS_UID = 1000  # the program's uid inside a user namespace; not 0, so exec drops all capabilities
SINGLE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
KEYCTL_JOIN_SESSION_KEYRING = 1
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "s390x": 280}
ENOSYS = 38

libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _bytes(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def mount(source, target, fstype, flags, data=None) -> None:
    result = libc.mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data))
    check(result, f"mount {target}")


def locked_flags(path: str) -> int:
    # Inside a user namespace a remount must keep the flags the source mount already has.
    f = os.statvfs(path).f_flag
    flags = MS_NOEXEC if f & os.ST_NOEXEC else 0
    for st, ms in ((os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME)):
        flags |= ms if f & st else 0
    return flags | (MS_RELATIME if f & os.ST_RELATIME else MS_STRICTATIME)


def bind_read_only(source: str, root: str) -> None:
    target = root + source
    if os.path.islink(source) and os.path.dirname(source) == "/":
        os.symlink(os.readlink(source), target)  # /lib -> usr/lib on merged-/usr systems
        return
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()
    mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(source)
    mount(None, target, None, flags)


def build_root(spec: dict) -> None:
    """A chroot of read-only binds (system dirs, the interpreter), devices and a private /tmp."""
    root = spec["mountpoint"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    # The private /tmp first: a venv or checkout under the host's /tmp is then bound inside it.
    os.makedirs(root + "/tmp")
    tmp_options = f"size={spec['limits']['disk_mb']}m,mode=1777"
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_options)
    for path in sorted(spec["binds"], key=len):  # parents first
        if os.path.lexists(path) and not os.path.lexists(root + path):
            bind_read_only(path, root)
    # The directories made inside the private /tmp to hold those binds are read-only too.
    for top in {"/tmp/" + p.split("/")[2] for p in spec["binds"] if p.startswith("/tmp/")}:
        target = root + top
        if os.path.isdir(target) and not os.path.ismount(target):
            mount(target, target, None, MS_BIND | MS_REC)
            mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for path in spec["masks"]:  # e.g. the base interpreter's site-packages: stdlib only
        if os.path.isdir(root + path):
            mount("tmpfs", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k")
    os.makedirs(root + "/dev", exist_ok=True)
    for device in DEVICES:
        open(root + device, "w").close()
        mount(device, root + device, None, MS_BIND)
    mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chroot(root)
    workdir = "/tmp/work"
    os.mkdir(workdir)
    for name, content in spec["files"].items():
        path = os.path.join(workdir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(content)
    with open("/tmp/.stdin", "w") as f:
        f.write(spec["stdin"])
    if spec["uid"] is not None:  # what the program owns: /tmp, its work dir and its stdin
        owned = ["/tmp", "/tmp/.stdin"]
        for directory, _, names in os.walk(workdir):
            owned += [directory] + [os.path.join(directory, n) for n in names]
        for name in owned:
            os.chown(name, spec["uid"], spec["uid"])
    os.chdir(workdir)


def set_limits(limits: dict) -> None:
    cpu = int(limits["cpu_seconds"] + 0.999)
    for name, soft, hard in (
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU first, then SIGKILL
        (resource.RLIMIT_AS, limits["memory_mb"] << 20, limits["memory_mb"] << 20),
        (resource.RLIMIT_NPROC, limits["max_processes"], limits["max_processes"]),
        (resource.RLIMIT_FSIZE, limits["max_file_mb"] << 20, limits["max_file_mb"] << 20),
        (resource.RLIMIT_NOFILE, limits["max_open_files"], limits["max_open_files"]),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(name, (soft, hard))


def join_cgroups(directories: list[str]) -> None:
    # Before anything else, so every process the program starts is counted with it.
    for directory in directories:
        with open(directory + "/cgroup.procs", "w") as f:
            f.write("0")  # this process


def fresh_session_keyring() -> None:
    """An anonymous, empty session keyring: the keys of whoever started the trainer stay out."""
    number = SYS_KEYCTL.get(os.uname().machine)
    if number is None:
        raise OSError(f"no keyctl system call number known for {os.uname().machine}")
    if libc.syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        if ctypes.get_errno() != ENOSYS:  # a kernel without keyrings has none to leak
            check(-1, "join a fresh session keyring")


def run_child(spec: dict, error_fd: int) -> None:
    """PID 1 of the new namespace: isolate, drop privileges, exec. Never returns."""
    try:
        os.setsid()  # its own session and group: nothing it signals reaches the launcher
        join_cgroups(spec["cgroups"])
        fresh_session_keyring()
        build_root(spec)
        uid = spec["uid"]
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
        set_limits(spec["limits"])
        stdin = os.open("/tmp/.stdin", os.O_RDONLY)
        os.dup2(stdin, 0)
        os.unlink("/tmp/.stdin")  # fd 0 only: the code-test harness's secret comes this way
        os.closerange(3, error_fd)
        os.closerange(error_fd + 1, 65536)  # the status pipe among them
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp/work", "LANG": "C.UTF-8"}
        # BLAS and OpenMP size their thread pools by the host's cores: on a 16-core machine
        # OpenBLAS's buffers alone overran the memory cap before numpy's import finished.
        env |= dict.fromkeys(SINGLE_THREAD, "1")
        if spec["pythonpath"]:
            env["PYTHONPATH"] = spec["pythonpath"]
        os.execve(spec["argv"][0], spec["argv"], env)
    except BaseException as e:  # noqa: BLE001 - every failure must reach the launcher
        os.write(error_fd, f"{type(e).__name__}: {e}".encode())
        os._exit(127)


def is_root() -> bool:
    """Root of the initial user namespace, which may create namespaces and change uid."""
    with open("/proc/self/uid_map") as f:
        return os.getuid() == 0 and f.read().split() == ["0", "0", "4294967295"]


def enter_namespaces(spec: dict) -> None:
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if spec["uid"] is not None:
        check(libc.unshare(flags), "unshare")
        return
    uid, gid = os.getuid(), os.getgid()
    check(libc.unshare(flags | CLONE_NEWUSER), "unshare (user namespaces)")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{NS_UID} {uid} 1"),
        ("gid_map", f"{NS_UID} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def report(spec: dict, event: dict) -> None:
    os.write(spec["status_fd"], (json.dumps(event) + "\n").encode())


def main() -> None:
    spec = json.loads(sys.stdin.buffer.read())
    as_root = is_root() and not spec["user_namespace"]
    spec["uid"] = SANDBOX_UID_BASE + os.getpid() % 50_000 if as_root else None
    try:
        enter_namespaces(spec)
    except OSError as e:
        report(spec, {"event": "error", "error": str(e)})
        return
    error_r, error_w = os.pipe2(os.O_CLOEXEC)  # closes on a successful exec, so EOF = started
    pid = os.fork()
    if pid == 0:
        os.close(error_r)
        run_child(spec, error_w)
    os.close(error_w)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    report(spec, {"event": "started", "pid": pid})
    pidfd = os.pidfd_open(pid)
    timed_out = not select.select([pidfd], [], [], spec["limits"]["wall_seconds"])[0]
    if timed_out:
        os.kill(pid, signal.SIGKILL)  # PID 1 dies, and the kernel kills the whole namespace
    _, status, usage = os.wait4(pid, 0)
    error = os.read(error_r, 4096).decode(errors="replace")
    if error:
        report(spec, {"event": "error", "error": f"sandbox setup failed: {error}"})
        return
    code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    report(spec, {"event": "exit", "returncode": code, "timed_out": timed_out, "cpu_seconds": cpu})


if __name__ == "__main__":
    main()
