"""Memory and process caps for a whole sandbox execution: a cgroup (v2, else v1) per execution,
which the program's PID 1 joins before exec; `CgroupCap.create` says why when none can be made."""

from __future__ import annotations

import itertools
import os
import secrets
import time
from dataclasses import dataclass, field

RELEASE_SECONDS = 2.0  # a killed namespace's processes may take a moment to leave the cgroup


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of each cgroup mount, from /proc/self/mountinfo."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            rest = fields[fields.index("-") + 1 :]
            if rest[0] in ("cgroup", "cgroup2"):
                found.append((fields[4], rest[0], set(rest[2].split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """Controller (or "" for the v2 hierarchy) -> this process's cgroup path."""
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@dataclass
class CgroupCap:
    """The parent cgroup directories (one per hierarchy) and the version they belong to."""

    version: int
    parents: dict[str, str]  # "memory" / "pids" (v1) or "unified" (v2) -> directory
    _counter: itertools.count = field(default_factory=itertools.count)

    @classmethod
    def create(cls) -> tuple[CgroupCap | None, str]:
        """A cap ready for executions, or None and the reason none could be set up here."""
        try:
            mounts, own = _mounts(), _own_cgroups()
        except OSError as e:
            return None, f"cannot read this process's cgroups: {e}"
        name = f"rlvr-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
        reasons = []
        for attempt in (cls._create_v2, cls._create_v1):
            try:
                return attempt(mounts, own, name), ""
            except (OSError, LookupError) as e:
                reasons.append(str(e))
        return None, "; ".join(reasons)

    @classmethod
    def _create_v2(cls, mounts, own, name) -> CgroupCap:
        mount = next((m for m, kind, _ in mounts if kind == "cgroup2"), None)
        if mount is None or "" not in own:
            raise LookupError("no cgroup v2 hierarchy")
        here = mount + own[""].rstrip("/")
        with open(here + "/cgroup.controllers") as f:
            available = set(f.read().split())
        if not {"memory", "pids"} <= available:
            raise LookupError(f"cgroup v2 at {here} offers {sorted(available)}, not memory+pids")
        # Controllers are enabled for our children in our own cgroup. cgroup v2 refuses that
        # (EBUSY) while processes sit in it, unless it is the root: then we fall back.
        _write(here + "/cgroup.subtree_control", "+memory +pids")
        parent = f"{here}/{name}"
        os.mkdir(parent)
        try:
            _write(parent + "/cgroup.subtree_control", "+memory +pids")
        except OSError:
            os.rmdir(parent)
            raise
        return cls(2, {"unified": parent})

    @classmethod
    def _create_v1(cls, mounts, own, name) -> CgroupCap:
        parents = {}
        for controller in ("memory", "pids"):
            mount = next((m for m, kind, o in mounts if kind == "cgroup" and controller in o), None)
            if mount is not None and controller in own:
                parents[controller] = f"{mount}{own[controller].rstrip('/')}/{name}"
        if "memory" not in parents:
            raise LookupError("no cgroup v1 memory hierarchy")
        made = []
        try:
            for directory in parents.values():
                os.mkdir(directory)
                made.append(directory)
        except OSError:
            for directory in made:
                os.rmdir(directory)
            raise
        return cls(1, parents)

    def execution(self, memory_mb: int, max_processes: int) -> list[str]:
        """Fresh cgroups for one execution with its limits set; their directories, whose
        cgroup.procs the program's PID 1 writes itself into. Raises OSError when refused."""
        name = f"e{next(self._counter)}"
        made: list[str] = []
        try:
            for kind, parent in self.parents.items():
                directory = f"{parent}/{name}"
                os.mkdir(directory)
                made.append(directory)
                self._limit(kind, directory, memory_mb << 20, max_processes)
        except OSError:
            self.release(made)
            raise
        return made

    def _limit(self, kind: str, directory: str, memory: int, processes: int) -> None:
        if kind == "unified":
            _write(directory + "/memory.max", str(memory))
            if os.path.exists(directory + "/memory.swap.max"):
                _write(directory + "/memory.swap.max", "0")
            _write(directory + "/pids.max", str(processes))
        elif kind == "memory":
            _write(directory + "/memory.limit_in_bytes", str(memory))
            if os.path.exists(directory + "/memory.memsw.limit_in_bytes"):
                try:  # memory + swap; absent or refused where swap accounting is off
                    _write(directory + "/memory.memsw.limit_in_bytes", str(memory))
                except OSError:
                    pass
        else:
            _write(directory + "/pids.max", str(processes))

    def oom_killed(self, directories: list[str]) -> bool:
        """Whether the kernel killed a process of this execution for its memory cap."""
        for directory in directories:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    with open(f"{directory}/{name}") as f:
                        for line in f:
                            key, _, value = line.partition(" ")
                            if key == "oom_kill" and int(value) > 0:
                                return True
                except OSError:
                    continue
        return False

    def release(self, directories: list[str]) -> None:
        """Remove an execution's cgroups once its processes are gone."""
        deadline = time.monotonic() + RELEASE_SECONDS
        for directory in directories:
            while True:
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left for close()
                    time.sleep(0.01)

    def close(self) -> None:
        for parent in self.parents.values():
            leftovers = (
                [e.path for e in os.scandir(parent) if e.is_dir()] if os.path.isdir(parent) else []
            )
            self.release(leftovers + [parent])
