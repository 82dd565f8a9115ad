"""Policy losses: fn(LossInputs, AlgoConfig) -> LossOutput, and how per-token terms are reduced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from rlvr.config import AlgoConfig


@dataclass
class LossInputs:
    logprobs: torch.Tensor  # [B, T] current policy, with grad
    old_logprobs: torch.Tensor  # [B, T] policy that sampled (or was current at the epoch start)
    advantages: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T] float, 1 on policy tokens
    # Normalisers of the whole minibatch, not of this micro-batch: with them the sum of
    # micro-batch losses equals the minibatch loss, so accumulation never changes the update.
    num_tokens: float
    num_seqs: int
    norm_constant: float = 1.0  # seq-mean-token-sum-norm's divisor (Dr. GRPO: the token budget)


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar
    metrics: dict[str, float] = field(default_factory=dict)  # additive across micro-batches


def token_mean(values: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    """Every policy token of the minibatch weighs the same (DAPO's token-level loss)."""
    return (values * inputs.loss_mask).sum() / max(inputs.num_tokens, 1.0)


# fn(per-token values [B, T], inputs) -> scalar; masks and normalisers come from the inputs
AggregateFn = Callable[[torch.Tensor, LossInputs], torch.Tensor]
AGGREGATIONS: dict[str, AggregateFn] = {"token-mean": token_mean}


def ppo_clip(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """PPO clipped surrogate with separate clip_low / clip_high (clip-higher when high > low)."""
    mask = inputs.loss_mask
    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20, 20)
    ratio = log_ratio.exp()
    unclipped = -inputs.advantages * ratio
    clipped = -inputs.advantages * ratio.clamp(1 - algo.clip_low, 1 + algo.clip_high)
    per_token = torch.maximum(unclipped, clipped)
    aggregate = AGGREGATIONS[algo.loss_agg]
    loss = aggregate(per_token, inputs)
    with torch.no_grad():
        n = max(inputs.num_tokens, 1.0)
        metrics = {
            "clip_frac": float(((clipped > unclipped).float() * mask).sum() / n),
            "ppo_kl": float((-log_ratio * mask).sum() / n),
        }
    return LossOutput(loss, metrics)


LOSSES: dict[str, Callable[[LossInputs, AlgoConfig], LossOutput]] = {"ppo_clip": ppo_clip}
