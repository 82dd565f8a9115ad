"""Reward shaping: DAPO's soft overlong penalty, and when multi-turn rewards reach the learner."""

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
