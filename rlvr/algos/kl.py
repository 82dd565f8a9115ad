"""Per-token KL estimators between the policy and a reference, and the adaptive KL coefficient.

Each is fn(logprobs [B, T], ref_logprobs [B, T], algo) -> [B, T]. A `+` form has the value of
the estimator it names and the gradient of k2, whose expected gradient is the true KL's (verl's
straight-through k1+ / k3+ / abs+); without algo (None), k3 is not clamped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.config import AlgoConfig

KLFn = Callable[[torch.Tensor, torch.Tensor, AlgoConfig | None], torch.Tensor]


def k1(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, algo: AlgoConfig | None = None
) -> torch.Tensor:
    """k1 = log pi - log ref: unbiased, high variance, can be negative."""
    return logprobs - ref_logprobs


def k2(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, algo: AlgoConfig | None = None
) -> torch.Tensor:
    """k2 = (log pi - log ref)^2 / 2: biased, low variance; its gradient is the true KL's."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def k3(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, algo: AlgoConfig | None = None
) -> torch.Tensor:
    """k3 = r - 1 - log r with r = ref/pi: unbiased, non-negative, low variance (Schulman).

    At most algo.kl_clamp when that is set (no gradient where the clamp holds)."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20, 20)  # exp overflow guard
    kl = log_ratio.exp() - 1 - log_ratio
    clamp = None if algo is None else algo.kl_clamp
    return kl if clamp is None else kl.clamp(max=clamp)


def abs_kl(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, algo: AlgoConfig | None = None
) -> torch.Tensor:
    """abs = |log pi - log ref|: a non-negative distance, not an unbiased KL."""
    return (logprobs - ref_logprobs).abs()


def _straight_through(
    value: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor
) -> torch.Tensor:
    """`value` forward, k2's gradient backward: sg(value) + k2 - sg(k2)."""
    quadratic = k2(logprobs, ref_logprobs)
    return value.detach() + (quadratic - quadratic.detach())


def k1_plus(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, algo: AlgoConfig | None = None
) -> torch.Tensor:
    """k1+: the value of k1 with the gradient of k2 (straight-through)."""
    return _straight_through(k1(logprobs, ref_logprobs), logprobs, ref_logprobs)


def k3_plus(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, algo: AlgoConfig | None = None
) -> torch.Tensor:
    """k3+: the value of k3 (clamped by algo.kl_clamp) with the gradient of k2 (straight-through)."""
    return _straight_through(k3(logprobs, ref_logprobs, algo), logprobs, ref_logprobs)


def abs_plus(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, algo: AlgoConfig | None = None
) -> torch.Tensor:
    """abs+: the value of abs with the gradient of k2 (straight-through)."""
    return _straight_through(abs_kl(logprobs, ref_logprobs), logprobs, ref_logprobs)


class AdaptiveKLCoef:
    """Proportional controller that steers the KL coefficient toward a target KL (Ziegler et al., 2019)."""

    def __init__(self, initial: float, target: float | None, horizon: int):
        self.value, self.target, self.horizon = initial, target, horizon

    def update(self, measured_kl: float, num_samples: int) -> float:
        if self.target is not None:
            error = max(-0.2, min(0.2, measured_kl / self.target - 1))
            self.value *= 1 + error * num_samples / self.horizon
        return self.value


KL_ESTIMATORS: dict[str, KLFn] = {
    "k1": k1,
    "k2": k2,
    "k3": k3,
    "abs": abs_kl,
    "k1+": k1_plus,
    "k3+": k3_plus,
    "abs+": abs_plus,
}
