"""The reward signature and `score_safely`, which turns any misbehaving reward into a crash Score."""

from __future__ import annotations

import math
import numbers
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


def score_safely(
    fn: RewardFn, problem: Problem, response: str, timeout: float | None = None
) -> Score:
    """Call a reward so that nothing it does (raise, return junk, hang past `timeout` seconds)
    can stop training."""
    if timeout is None:
        return _checked(fn, problem, response)
    result: list[Score] = []
    # A daemon thread, because a hung reward cannot be interrupted, only abandoned.
    worker = threading.Thread(
        target=lambda: result.append(_checked(fn, problem, response)), daemon=True
    )
    worker.start()
    worker.join(timeout)
    if not result:
        return Score(0.0, "timeout", {"error": f"reward did not return within {timeout:g} s"})
    return result[0]


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
