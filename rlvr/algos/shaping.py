"""Reward shaping: DAPO's soft overlong penalty, when multi-turn rewards reach the learner, and
Parason's parallel-structure bonus."""

from __future__ import annotations

import torch


def overlong_penalty(
    lengths: torch.Tensor, max_tokens: int, window: int, factor: float
) -> torch.Tensor:
    """Penalty [B] (<= 0) for responses of `lengths` tokens: 0 up to max_tokens - window, then
    falling linearly to -factor at max_tokens, and -factor beyond (Yu et al., 2025, eq. 13)."""
    if window <= 0:
        return torch.zeros_like(lengths, dtype=torch.float)
    start = max_tokens - window
    return -factor * ((lengths.float() - start) / window).clamp(0.0, 1.0)


def time_rewards(turn_rewards: list[float], timing: str) -> list[float]:
    """Per-turn rewards as the learner sees them: 'per_turn' unchanged, 'delayed' all summed
    onto the last turn, 'terminal' only the last turn's (the outcome)."""
    if timing == "per_turn" or not turn_rewards:
        return list(turn_rewards)
    last = sum(turn_rewards) if timing == "delayed" else turn_rewards[-1]
    return [0.0] * (len(turn_rewards) - 1) + [last]


def group_zscores(values: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(v - group mean) / group std [B] (population std); 0 in a group whose std is <= eps."""
    z = torch.zeros_like(values, dtype=torch.float64)
    for group in group_ids.unique():
        rows = group_ids == group
        v = values[rows].double()
        std = v.std(correction=0)
        if std > eps:
            z[rows] = (v - v.mean()) / std
    return z


def parallel_bonus(
    acceleration: torch.Tensor,
    structure: torch.Tensor,
    correct: torch.Tensor,
    group_ids: torch.Tensor,
    accel_weight: float,
    accel_cap: float,
    betas: tuple[float, float, float],
    latency_alpha: float,
) -> torch.Tensor:
    """Parason's reward on top of correctness [B] (arXiv 2608.24658), paid to correct rollouts
    only: accel_weight * min(acceleration - 1, accel_cap), plus the group z-scores of the
    structure shares [B, 3] (subtask, trial, parallel ratio) weighted by `betas` and of the
    acceleration weighted by `latency_alpha`. Z-scores are taken over the whole group, wrong
    rollouts included, as the reference reward manager does."""
    bonus = accel_weight * (acceleration.double() - 1).clamp(max=accel_cap)
    for column, beta in enumerate(betas):
        if beta:
            bonus = bonus + beta * group_zscores(structure[:, column], group_ids)
    if latency_alpha:
        bonus = bonus + latency_alpha * group_zscores(acceleration, group_ids)
    return torch.where(correct.bool(), bonus, 0.0)
