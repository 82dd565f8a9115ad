"""Policy losses: fn(LossInputs, AlgoConfig) -> LossOutput, and how per-token terms are reduced.

Every loss builds a per-token term [B, T] and reduces it with AGGREGATIONS[algo.loss_agg]. The
trainer calls a loss once per micro-batch (a subset of the minibatch's rows) with the normalisers
of the whole minibatch, so each aggregation and each metric is a sum over rows divided by
minibatch constants: the micro-batch losses and metrics add up exactly to the minibatch's.
"""

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
    behaviour_logprobs: torch.Tensor | None = None  # [B, T] the engine's sampling logprobs (dis)


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar
    metrics: dict[str, float] = field(default_factory=dict)  # additive across micro-batches


# ---- aggregations: fn(per-token values [B, T], inputs) -> scalar ----


def _row_sums(values: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    return (values * inputs.loss_mask).sum(-1)  # [B]


def token_mean(values: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    """Every policy token of the minibatch weighs the same (DAPO's token-level loss)."""
    return (values * inputs.loss_mask).sum() / max(inputs.num_tokens, 1.0)


def seq_mean_token_sum(values: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    """Sum over each sequence's tokens, mean over sequences (long responses weigh more)."""
    return _row_sums(values, inputs).sum() / max(inputs.num_seqs, 1)


def seq_mean_token_mean(values: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    """Mean over each sequence's own tokens, then over sequences (original GRPO; GSPO's choice)."""
    lengths = inputs.loss_mask.sum(-1).clamp(min=1.0)  # an empty row sums to 0 and adds 0
    return (_row_sums(values, inputs) / lengths).sum() / max(inputs.num_seqs, 1)


def seq_mean_token_sum_norm(values: torch.Tensor, inputs: LossInputs) -> torch.Tensor:
    """Each sequence's token sum / norm_constant, mean over sequences (Dr. GRPO's constant)."""
    return _row_sums(values, inputs).sum() / inputs.norm_constant / max(inputs.num_seqs, 1)


# ---- shared pieces of the losses ----


def _aggregate(per_token: torch.Tensor, inputs: LossInputs, algo: AlgoConfig) -> torch.Tensor:
    return AGGREGATIONS[algo.loss_agg](per_token, inputs)


def _log_ratio(inputs: LossInputs) -> torch.Tensor:
    """log(pi / pi_old) per token, clamped so that exp() never overflows."""
    return (inputs.logprobs - inputs.old_logprobs).clamp(-20, 20)


def _token_avg(values: torch.Tensor, inputs: LossInputs) -> float:
    """Metric: sum over this micro-batch's policy tokens / the minibatch's token count."""
    summed = (values.detach().to(inputs.loss_mask.dtype) * inputs.loss_mask).sum()
    return float(summed / max(inputs.num_tokens, 1.0))


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, algo: AlgoConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's pessimistic per-token loss max(-A r, -A clip(r)), and where the clip binds."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - algo.clip_low, 1 + algo.clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


# ---- losses: fn(inputs, algo) -> LossOutput ----


def ppo_clip(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """PPO clipped surrogate with separate clip_low / clip_high (clip-higher when high > low)."""
    log_ratio = _log_ratio(inputs)
    per_token, clipped = _clipped_surrogate(log_ratio.exp(), inputs.advantages, algo)
    metrics = {"clip_frac": _token_avg(clipped, inputs), "ppo_kl": _token_avg(-log_ratio, inputs)}
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def dual_clip(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """ppo_clip whose loss for a negative advantage is capped at dual_clip_c * |A| (Ye et al. 2020).

    With A < 0 the clipped surrogate -A r grows without bound in r, so one token whose
    probability rose a lot (stale data) can dominate a step; the cap makes its gradient zero.
    Reference: "Mastering Complex Control in MOBA Games with Deep RL" (arXiv:1912.09729);
    verl's compute_policy_loss_vanilla (clip_ratio_c).
    """
    log_ratio = _log_ratio(inputs)
    adv = inputs.advantages
    per_token, clipped = _clipped_surrogate(log_ratio.exp(), adv, algo)
    cap = -adv * algo.dual_clip_c
    lower = (adv < 0) & (per_token > cap)
    metrics = {
        "clip_frac": _token_avg(clipped, inputs),
        "clip_frac_lower": _token_avg(lower, inputs),
        "ppo_kl": _token_avg(-log_ratio, inputs),
    }
    return LossOutput(_aggregate(torch.where(lower, cap, per_token), inputs, algo), metrics)


def gspo(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """GSPO: PPO clip on the sequence ratio s_i = exp(mean_t log r_t) (Qwen, arXiv:2507.18071).

    Token-level form of the paper (GSPO-token): r_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)], so
    the value is s_i on every token of sequence i while each token gets its own gradient
    s_i * grad log pi(y_t); with one advantage per sequence this equals sequence-level GSPO.
    Sequence ratios sit near 1, so clip_low / clip_high are set small (the paper: 3e-4 / 4e-4).
    The paper (and verl's compute_policy_loss_gspo) reduce with seq-mean-token-mean.
    """
    mask = inputs.loss_mask
    log_ratio = _log_ratio(inputs)
    seq_log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B], log s_i
    lp = inputs.logprobs
    token_log_ratio = (lp - lp.detach()) + seq_log_ratio.detach().unsqueeze(-1)
    per_token, clipped = _clipped_surrogate(token_log_ratio.exp(), inputs.advantages, algo)
    metrics = {"clip_frac": _token_avg(clipped, inputs), "ppo_kl": _token_avg(-log_ratio, inputs)}
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def cispo(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """CISPO: REINFORCE weighted by a clipped, stop-gradient ratio (MiniMax-M1, arXiv:2506.13585).

    loss = -sg(clip(r, 1 - clip_low, 1 + clip_high)) * A * log pi. Unlike PPO no token ever
    loses its gradient; clipping only bounds its weight. The paper clips only from above:
    set clip_low >= 1 (no lower bound) and clip_high to e.g. 4 (weight at most 5).
    """
    log_ratio = _log_ratio(inputs)
    ratio = log_ratio.exp().detach()
    weight = ratio.clamp(1 - algo.clip_low, 1 + algo.clip_high)
    per_token = -weight * inputs.advantages * inputs.logprobs
    metrics = {
        "clip_frac": _token_avg(weight != ratio, inputs),
        "ppo_kl": _token_avg(-log_ratio, inputs),
    }
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def sapo(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """SAPO: a smooth sigmoid gate on the ratio instead of a hard clip (Qwen, arXiv:2511.20347).

    loss = -f(r) * A with f(r) = sigmoid(tau * (r - 1)) * 4 / tau, tau = sapo_tau_pos where
    A > 0 else sapo_tau_neg (as in the paper and verl's compute_policy_loss_sapo). The 4 / tau
    makes f'(1) = 1, so near r = 1 the gradient is the plain policy gradient; away from 1 it
    decays smoothly (faster for larger tau) rather than dropping to zero at a clip edge.
    """
    log_ratio = _log_ratio(inputs)
    adv = inputs.advantages
    tau = torch.where(adv > 0, adv.new_tensor(algo.sapo_tau_pos), adv.new_tensor(algo.sapo_tau_neg))
    gate = torch.sigmoid(tau * (log_ratio.exp() - 1)) * 4 / tau
    return LossOutput(
        _aggregate(-gate * adv, inputs, algo), {"ppo_kl": _token_avg(-log_ratio, inputs)}
    )


def dis(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """DIS (SAO, arXiv:2607.07508): -sg(f(r) * A) * log pi, r = pi / pi_behaviour, f(r) = r inside
    (1 - dis_clip_low, 1 + dis_clip_high), else 0.

    Direct double-sided importance sampling: the ratio is to the engine's own sampling logprobs,
    with no recomputed pi_old. A token whose ratio leaves the band gets no gradient, but stays in
    the aggregation's denominator. `mask_frac` is the share of policy tokens so dropped.
    """
    if inputs.behaviour_logprobs is None:
        raise ValueError(
            "loss 'dis' needs LossInputs.behaviour_logprobs (the engine's sampling logprobs), "
            "which the update fills from batch.behaviour_logprobs; got None."
        )
    log_ratio = (inputs.logprobs - inputs.behaviour_logprobs).clamp(-20, 20).detach()
    ratio = log_ratio.exp()
    inside = (ratio > 1 - algo.dis_clip_low) & (ratio < 1 + algo.dis_clip_high)
    weight = torch.where(inside, ratio, 0.0) * inputs.advantages
    metrics = {"mask_frac": _token_avg(~inside, inputs), "ppo_kl": _token_avg(-log_ratio, inputs)}
    return LossOutput(_aggregate(-weight * inputs.logprobs, inputs, algo), metrics)


def reinforce(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """Plain on-policy policy gradient, -A * log pi (ignores old logprobs; no clipping)."""
    return LossOutput(_aggregate(-inputs.advantages * inputs.logprobs, inputs, algo))


# fn(per-token values [B, T], inputs) -> scalar; masks and normalisers come from the inputs
AggregateFn = Callable[[torch.Tensor, LossInputs], torch.Tensor]
AGGREGATIONS: dict[str, AggregateFn] = {
    "token-mean": token_mean,
    "seq-mean-token-sum": seq_mean_token_sum,
    "seq-mean-token-mean": seq_mean_token_mean,
    "seq-mean-token-sum-norm": seq_mean_token_sum_norm,
}

LossFn = Callable[[LossInputs, AlgoConfig], LossOutput]
LOSSES: dict[str, LossFn] = {
    "ppo_clip": ppo_clip,
    "dual_clip": dual_clip,
    "gspo": gspo,
    "cispo": cispo,
    "sapo": sapo,
    "dis": dis,
    "reinforce": reinforce,
}
