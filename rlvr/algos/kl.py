"""Per-token KL estimators between the policy and a reference, from logprobs of sampled tokens."""

from __future__ import annotations

from collections.abc import Callable

import torch

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log ref: unbiased, high variance, can be negative."""
    return logprobs - ref_logprobs


def k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = r - 1 - log r with r = ref/pi: unbiased, non-negative, low variance (Schulman)."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20, 20)  # exp overflow guard
    return log_ratio.exp() - 1 - log_ratio


KL_ESTIMATORS: dict[str, KLFn] = {"k1": k1, "k3": k3}
