"""Combine reward components into one reward: a weighted sum, or hierarchical gates where a
component counts only once every one before it is satisfied. Each component's value is in info."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from rlvr.rewards.base import RewardFn, as_reward_fn, score_safely
from rlvr.types import Problem, Score

# When components disagree, the status that says most about what went wrong wins.
_SEVERITY = ("infra_error", "crash", "timeout")


def _resolve(
    components: Mapping[str, float], registry: Mapping[str, RewardFn] | None
) -> dict[str, RewardFn]:
    if registry is None:
        from rlvr.rewards import REWARDS  # here, not at the top: REWARDS is built from this package

        registry = REWARDS
    if not components:
        raise ValueError("a combined reward needs at least one component")
    for name in components:
        if name not in registry:
            close = difflib.get_close_matches(name, list(registry), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise KeyError(f"unknown reward {name!r}.{hint} Known: {', '.join(sorted(registry))}")
    return {name: as_reward_fn(registry[name]) for name in components}


def _combine(scores: dict[str, Score], weights: Mapping[str, float]) -> Score:
    value = sum(weights[name] * score.value for name, score in scores.items())
    info: dict[str, float | str] = {name: score.value for name, score in scores.items()}
    # A component's own numbers (the code reward's passed / total / weak_tests) are logged too.
    info.update(
        (f"{name}/{key}", float(v))
        for name, score in scores.items()
        for key, v in score.info.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    )
    errors = [f"{name}: {s.info['error']}" for name, s in scores.items() if "error" in s.info]
    if errors:
        info["error"] = "; ".join(errors)
    statuses = {score.status for score in scores.values()}
    status = next((s for s in _SEVERITY if s in statuses), "ok" if value > 0 else "wrong")
    return Score(value, status, info)


def weighted(
    components: Mapping[str, float], registry: Mapping[str, RewardFn] | None = None
) -> RewardFn:
    """A reward that sums `weight * component` over named components of `registry` (default REWARDS)."""
    fns, weights = _resolve(components, registry), dict(components)

    def combined(problem: Problem, response: str) -> Score:
        return _combine(
            {name: score_safely(fn, problem, response) for name, fn in fns.items()}, weights
        )

    combined.__doc__ = "Weighted sum of " + ", ".join(f"{w:g}*{n}" for n, w in weights.items())
    return combined


def gated(
    components: Mapping[str, float], registry: Mapping[str, RewardFn] | None = None
) -> RewardFn:
    """Hierarchical reward: components in order (e.g. format, then correctness, then length);
    each adds `weight * value` only while every earlier one scored its full 1.0 with status ok.
    Gated-off components are not run and log 0."""
    fns, weights = _resolve(components, registry), dict(components)

    def combined(problem: Problem, response: str) -> Score:
        scores, open_gate = {}, True
        for name, fn in fns.items():
            scores[name] = score_safely(fn, problem, response) if open_gate else Score(0.0, "wrong")
            open_gate = open_gate and scores[name].status == "ok" and scores[name].value >= 1.0
        return _combine(scores, weights)

    combined.__doc__ = "Gated sum of " + " > ".join(f"{w:g}*{n}" for n, w in weights.items())
    return combined


def by_domain(routes: Mapping[str, RewardFn]) -> RewardFn:
    """A reward that scores each problem with the reward of its `domain` (a mix of tasks)."""

    def routed(problem: Problem, response: str) -> Score:
        return routes[problem.domain](problem, response)

    return routed
