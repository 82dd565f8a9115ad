"""Reward shaping that depends on the response, not the answer: DAPO's soft overlong penalty."""

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
