"""Per-token KL estimators between the policy and a reference, and the adaptive KL coefficient."""

from __future__ import annotations

from collections.abc import Callable

import torch

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log ref: unbiased, high variance, can be negative."""
    return logprobs - ref_logprobs


def k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = (log pi - log ref)^2 / 2: biased, low variance; its gradient is the true KL's."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = r - 1 - log r with r = ref/pi: unbiased, non-negative, low variance (Schulman)."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20, 20)  # exp overflow guard
    return log_ratio.exp() - 1 - log_ratio


def abs_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """abs = |log pi - log ref|: a non-negative distance, not an unbiased KL."""
    return (logprobs - ref_logprobs).abs()


class AdaptiveKLCoef:
    """Proportional controller that steers the KL coefficient toward a target KL (Ziegler et al., 2019)."""

    def __init__(self, initial: float, target: float | None, horizon: int):
        self.value, self.target, self.horizon = initial, target, horizon

    def update(self, measured_kl: float, num_samples: int) -> float:
        if self.target is not None:
            error = max(-0.2, min(0.2, measured_kl / self.target - 1))
            self.value *= 1 + error * num_samples / self.horizon
        return self.value


KL_ESTIMATORS: dict[str, KLFn] = {"k1": k1, "k2": k2, "k3": k3, "abs": abs_kl}
