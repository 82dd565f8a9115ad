"""Combine reward components into one reward: a weighted sum with per-component values in info."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from rlvr.rewards.base import RewardFn, score_safely
from rlvr.types import Problem, Score

# When components disagree, the status that says most about what went wrong wins.
_SEVERITY = ("infra_error", "crash", "timeout")


def weighted(
    components: Mapping[str, float], registry: Mapping[str, RewardFn] | None = None
) -> RewardFn:
    """A reward that sums `weight * component` over named components of `registry` (default REWARDS)."""
    if registry is None:
        from rlvr.rewards import REWARDS  # here, not at the top: REWARDS is built from this package

        registry = REWARDS
    if not components:
        raise ValueError("weighted() needs at least one reward component")
    for name in components:
        if name not in registry:
            close = difflib.get_close_matches(name, list(registry), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise KeyError(f"unknown reward {name!r}.{hint} Known: {', '.join(sorted(registry))}")
    weights = dict(components)
    fns = {name: registry[name] for name in weights}

    def combined(problem: Problem, response: str) -> Score:
        scores = {name: score_safely(fn, problem, response) for name, fn in fns.items()}
        value = sum(weights[name] * score.value for name, score in scores.items())
        info: dict[str, float | str] = {name: score.value for name, score in scores.items()}
        errors = [f"{name}: {s.info['error']}" for name, s in scores.items() if "error" in s.info]
        if errors:
            info["error"] = "; ".join(errors)
        statuses = {score.status for score in scores.values()}
        status = next((s for s in _SEVERITY if s in statuses), "ok" if value > 0 else "wrong")
        return Score(value, status, info)

    combined.__doc__ = "Weighted sum of " + ", ".join(f"{w:g}*{n}" for n, w in weights.items())
    return combined
