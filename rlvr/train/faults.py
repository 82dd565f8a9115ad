"""When a run goes wrong: failed rewards kept and shown, Ctrl-C stopping at a step boundary, and
messages that say which checkpoint `rlvr train --resume` continues from."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.markup import escape

from rlvr.train.checkpoint import checkpoint_step, complete_checkpoints
from rlvr.train.display import Display
from rlvr.train.rundir import RunDirError
from rlvr.types import Trajectory

FAILED = ("crash", "timeout", "infra_error")
SHOWN_KINDS = 10  # distinct errors printed before the console defers to the file


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run; the message says what `--resume` continues from."""


def resume_hint(run_dir: Path) -> str:
    """Which checkpoint `rlvr train --resume` continues from, and the command."""
    checkpoints = complete_checkpoints(run_dir / "checkpoints")
    if not checkpoints:
        return (
            f"no checkpoint is complete yet, so `rlvr train --resume {run_dir}` starts the run "
            "again from scratch"
        )
    last = checkpoints[-1]
    return (
        f"the last good checkpoint is {last} (step {checkpoint_step(last)}); "
        f"`rlvr train --resume {run_dir}` continues from it"
    )


def free_space(path: Path) -> str:
    """How much room is left where `path` lives: torch reports a full disk only as a failed
    write at some file position."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return f"{shutil.disk_usage(path).free / 1e6:.1f} MB free there"


@contextmanager
def explained_stops(run_dir: Path, step: Callable[[], int]) -> Iterator[None]:
    """Turns a Ctrl-C mid-step, and a full or read-only disk, into errors that say what survived
    and how to go on (`step()`: the number of whole steps done)."""
    try:
        yield
    except TrainingInterrupted:
        raise
    except KeyboardInterrupt:
        raise TrainingInterrupted(
            f"interrupted after {step()} whole steps; {resume_hint(run_dir)}"
        ) from None
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        raise RunDirError(
            f"could not write to {run_dir} ({e}; {free_space(run_dir)}); {resume_hint(run_dir)} "
            "once the disk has room or is writable again"
        ) from e


@contextmanager
def stop_at_step_end() -> Iterator[Callable[[], bool]]:
    """Yields `requested()`: true once Ctrl-C was pressed. The first Ctrl-C lets the current step
    finish (so the loop can save an exact checkpoint); a second one interrupts at once. Only in
    the main thread and while Ctrl-C has Python's default handler: an application that handles
    SIGINT itself keeps its own handling."""
    pressed = threading.Event()
    own = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )

    def handler(signum, frame) -> None:
        pressed.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # os.write, not print: a handler that prints while the loop is printing raises
        os.write(2, b"\nCtrl-C: stopping after this step to save it; Ctrl-C again stops now\n")

    if own:
        signal.signal(signal.SIGINT, handler)
    try:
        yield pressed.is_set
    finally:
        if own:
            signal.signal(signal.SIGINT, signal.default_int_handler)


class RewardErrors:
    """Appends every failed reward (or env) call to reward_errors.jsonl with its prompt and
    response, and prints the first occurrence of each distinct error."""

    def __init__(self, path: Path, display: Display):
        self.path, self.display = path, display
        self.seen: set[str] = set()

    def record(self, step: int, trajectories: list[Trajectory]) -> None:
        rows = [
            {
                "step": step,
                "status": t.status,
                "error": t.info.get("error"),
                "problem": t.problem.id,
                "prompt": t.problem.prompt,
                "response": t.response_text,
            }
            for t in trajectories
            if t.status in FAILED
        ]
        if not rows:
            return
        with open(self.path, "a") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        for row in rows:
            error = row["error"] or "(the reward gave no error text)"
            kind = f"{row['status']}: {error}"
            if kind in self.seen:
                continue
            self.seen.add(kind)
            if len(self.seen) <= SHOWN_KINDS:
                self.display.message(
                    f"[yellow]step {step}: reward {row['status']} on problem "
                    f"{escape(str(row['problem']))}: {escape(error)}[/yellow]\n"
                    f"  (every failure, with prompt and response, is in {self.path})"
                )
            elif len(self.seen) == SHOWN_KINDS + 1:
                self.display.message(
                    f"[yellow]more than {SHOWN_KINDS} distinct reward errors; the rest are only "
                    f"in {self.path}"
                )
