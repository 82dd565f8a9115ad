"""The reward signature and `score_safely`, which turns any misbehaving reward into a crash Score."""

from __future__ import annotations

import math
import numbers
import queue
import threading
from collections.abc import Callable
from typing import Any

from rlvr.types import STATUSES, Problem, Score

RewardFn = Callable[[Problem, str], Score]


def as_reward_fn(entry: Any) -> RewardFn:
    """A registry entry as a callable reward: a reward class is built with its default settings."""
    return entry(entry.Params()) if isinstance(entry, type) else entry


def _crash(error: str) -> Score:
    return Score(0.0, "crash", {"error": error})


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and math.isfinite(value)


class _Watchdog:
    """Runs calls on reusable daemon threads and waits for each at most a timeout. Daemon,
    because a hung reward cannot be interrupted, only abandoned (it keeps its thread, and a new
    one takes its place); reusable, because starting a thread per call costs more than most
    rewards."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], Score], timeout: float) -> Score | None:
        """fn(), or None when it has not returned within `timeout` seconds."""
        done, result = threading.Event(), []

        def job() -> None:
            try:
                result.append(fn())
            finally:
                done.set()

        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                threading.Thread(target=self._work, daemon=True, name="reward").start()
        self._jobs.put(job)
        return result[0] if done.wait(timeout) and result else None

    def _work(self) -> None:
        while True:
            self._jobs.get()()
            with self._lock:
                self._idle += 1


_WATCHDOG = _Watchdog()


def score_safely(
    fn: RewardFn, problem: Problem, response: str, timeout: float | None = None
) -> Score:
    """Call a reward so that nothing it does (raise, return junk, hang past `timeout` seconds)
    can stop training."""
    if timeout is None:
        return _checked(fn, problem, response)
    score = _WATCHDOG.run(lambda: _checked(fn, problem, response), timeout)
    if score is None:
        return Score(0.0, "timeout", {"error": f"reward did not return within {timeout:g} s"})
    return score


def _checked(fn: RewardFn, problem: Problem, response: str) -> Score:
    try:
        result = fn(problem, response)
    except Exception as e:
        return _crash(f"{type(e).__name__}: {e}")
    if isinstance(result, Score):
        if not _is_finite_number(result.value):
            return _crash(f"reward returned a Score with value {_short(result.value)}")
        if result.status not in STATUSES:
            return _crash(f"reward returned a Score with unknown status {result.status!r}")
        return Score(float(result.value), result.status, result.info)
    if _is_finite_number(result):
        return Score(float(result), "ok" if result > 0 else "wrong")
    return _crash(
        f"reward returned {type(result).__name__} {_short(result)}, not a Score or finite number"
    )
