"""Policy losses: fn(LossInputs, AlgoConfig) -> LossOutput, and how per-token terms are reduced.

A loss with settings of its own declares them as `fn.Params` (a FnParams model) and takes them
as the keyword `params`: the run's algo.loss_params, validated and bound before any work
(rlvr/train/components.py), so the update still calls fn(inputs, algo).

Every loss builds a per-token term [B, T] and reduces it with AGGREGATIONS[algo.loss_agg]. The
trainer calls a loss once per micro-batch (a subset of the minibatch's rows) with the normalisers
of the whole minibatch, so each aggregation and each metric is a sum over rows divided by
minibatch constants: the micro-batch losses and metrics add up exactly to the minibatch's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from pydantic import Field

from rlvr.algos.advantages import SoftQParams
from rlvr.config import AlgoConfig
from rlvr.registry import FnParams


@dataclass
class LossInputs:
    logprobs: torch.Tensor  # [B, T] current policy, with grad
    old_logprobs: torch.Tensor  # [B, T] policy that sampled (or was current at the epoch start)
    advantages: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T] float, 1 on policy tokens
    # Normalisers of the whole minibatch, not of this micro-batch: with them the sum of
    # micro-batch losses equals the minibatch loss, so accumulation never changes the update.
    num_tokens: float
    num_seqs: int  # rows the seq-mean aggregations divide by (algo.seq_mean_count_empty)
    norm_constant: float = 1.0  # seq-mean-token-sum-norm's divisor (Dr. GRPO: the token budget)
    behaviour_logprobs: torch.Tensor | None = None  # [B, T] the engine's sampling logprobs (dis)
    # soft_q: logsumexp of each position's logits under the policy (with grad) and the reference,
    # and the reference's logprobs of the sampled tokens
    normaliser: torch.Tensor | None = None  # [B, T]
    ref_logprobs: torch.Tensor | None = None  # [B, T]
    ref_normaliser: torch.Tensor | None = None  # [B, T]


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar
    metrics: dict[str, float] = field(default_factory=dict)  # additive across micro-batches


@dataclass
class Normalisers:
    """What an aggregation reads besides the per-token values (the critic's value loss has no
    logprobs; LossInputs carries the same fields)."""

    loss_mask: torch.Tensor  # [B, T]
    num_tokens: float
    num_seqs: int
    norm_constant: float = 1.0


# ---- aggregations: fn(per-token values [B, T], inputs) -> scalar ----


def _masked(values: torch.Tensor, inputs: LossInputs | Normalisers) -> torch.Tensor:
    """values on policy tokens, 0 elsewhere: a NaN or inf at padding never reaches a sum (or,
    by `where`'s zero gradient there, the gradient), as it would through `values * mask`."""
    return torch.where(inputs.loss_mask.bool(), values, 0.0)


def _row_sums(values: torch.Tensor, inputs: LossInputs | Normalisers) -> torch.Tensor:
    return _masked(values, inputs).sum(-1)  # [B]


def token_mean(values: torch.Tensor, inputs: LossInputs | Normalisers) -> torch.Tensor:
    """Every policy token of the minibatch weighs the same (DAPO's token-level loss)."""
    return _masked(values, inputs).sum() / max(inputs.num_tokens, 1.0)


def token_sum(values: torch.Tensor, inputs: LossInputs | Normalisers) -> torch.Tensor:
    """Sum over every policy token of the minibatch, no normaliser (verl's token-sum)."""
    return _masked(values, inputs).sum()


def seq_mean_token_sum(values: torch.Tensor, inputs: LossInputs | Normalisers) -> torch.Tensor:
    """Sum over each sequence's tokens, mean over sequences (long responses weigh more)."""
    return _row_sums(values, inputs).sum() / max(inputs.num_seqs, 1)


def seq_mean_token_mean(values: torch.Tensor, inputs: LossInputs | Normalisers) -> torch.Tensor:
    """Mean over each sequence's own tokens, then over sequences (original GRPO; GSPO's choice)."""
    lengths = inputs.loss_mask.sum(-1).clamp(min=1.0)  # an empty row sums to 0 and adds 0
    return (_row_sums(values, inputs) / lengths).sum() / max(inputs.num_seqs, 1)


def seq_mean_token_sum_norm(values: torch.Tensor, inputs: LossInputs | Normalisers) -> torch.Tensor:
    """Each sequence's token sum / norm_constant, mean over sequences (Dr. GRPO's constant)."""
    return _row_sums(values, inputs).sum() / inputs.norm_constant / max(inputs.num_seqs, 1)


# ---- the settings of the losses that take any (algo.loss_params) ----


class DualClipParams(FnParams):
    c: float = Field(
        3.0, gt=1, description="The loss of a negative-advantage token is at most c * |A|."
    )


class SapoParams(FnParams):
    tau_pos: float = Field(
        1.0, gt=0, description="Gate temperature for tokens with positive advantage."
    )
    tau_neg: float = Field(
        1.05, gt=0, description="Gate temperature for tokens with negative advantage."
    )


class GmpoParams(FnParams):
    clip: float = Field(0.4, gt=0, description="Token log-ratios are clipped to [-clip, clip].")


class DroParams(FnParams):
    beta: float = Field(0.1, gt=0, description="Weight of the (log pi - log pi_old)^2 / 2 penalty.")


class DppoParams(FnParams):
    ratio_cap: float = Field(
        20.0, gt=0, description="The stop-gradient ratio weight is at most this."
    )


class DppoTvParams(DppoParams):
    tv_delta: float = Field(
        0.15,
        gt=0,
        description="Tokens whose probability moved more than this (in the advantage's "
        "direction) get no gradient.",
    )


class DppoKlParams(DppoParams):
    kl_delta: float = Field(
        0.05,
        gt=0,
        description="Tokens whose Bernoulli KL to the old probability exceeds this (in the "
        "advantage's direction) get no gradient.",
    )


class KlCovParams(FnParams):
    ratio: float = Field(
        0.002,
        gt=0,
        le=1,
        description="Share of policy tokens (largest covariance of A and log pi) penalised.",
    )
    coef: float = Field(1.0, ge=0, description="Weight of the |log pi - log pi_old| penalty.")


class ClipCovParams(FnParams):
    ratio: float = Field(
        0.0002, gt=0, le=1, description="Share of policy tokens whose gradient is dropped."
    )
    lb: float = Field(1.0, description="Only tokens with covariance above this are dropped.")
    ub: float = Field(5.0, description="Only tokens with covariance below this are dropped.")


class DisParams(FnParams):
    clip_low: float = Field(
        0.3,
        ge=0,
        description="Tokens whose ratio to the sampling policy is <= 1 - clip_low get no "
        "gradient (algo.clip_low does not apply to dis).",
    )
    clip_high: float = Field(
        5.0,
        gt=0,
        description="Tokens whose ratio to the sampling policy is >= 1 + clip_high get no "
        "gradient.",
    )


# ---- shared pieces of the losses ----


def _aggregate(per_token: torch.Tensor, inputs: LossInputs, algo: AlgoConfig) -> torch.Tensor:
    return AGGREGATIONS[algo.loss_agg](per_token, inputs)


def _policy_logprobs(inputs: LossInputs) -> torch.Tensor:
    """log pi on policy tokens, 0 at padding: a NaN there gets neither a value nor a gradient."""
    return _masked(inputs.logprobs, inputs)


def _log_ratio(inputs: LossInputs) -> torch.Tensor:
    """log(pi / pi_old) per policy token (0 at padding), clamped so that exp() never overflows."""
    return _masked(inputs.logprobs - inputs.old_logprobs, inputs).clamp(-20, 20)


def _token_avg(values: torch.Tensor, inputs: LossInputs) -> float:
    """Metric: sum over this micro-batch's policy tokens / the minibatch's token count."""
    summed = _masked(values.detach().to(inputs.loss_mask.dtype), inputs).sum()
    return float(summed / max(inputs.num_tokens, 1.0))


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, algo: AlgoConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's pessimistic per-token loss max(-A r, -A clip(r)), and where the clip binds."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - algo.clip_low, 1 + algo.clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _ratio_metrics(
    log_ratio: torch.Tensor, clipped: torch.Tensor, lower: torch.Tensor, inputs: LossInputs
) -> dict[str, float]:
    """clip_frac (any clip binds), clip_frac_lower (the lower one, on A < 0) and ppo_kl."""
    return {
        "clip_frac": _token_avg(clipped, inputs),
        "clip_frac_lower": _token_avg(lower, inputs),
        "ppo_kl": _token_avg(-log_ratio, inputs),
    }


def _below(ratio: torch.Tensor, inputs: LossInputs, algo: AlgoConfig) -> torch.Tensor:
    """Negative-advantage tokens whose ratio is under 1 - clip_low (where PPO's lower clip binds)."""
    return (inputs.advantages < 0) & (ratio < 1 - algo.clip_low)


def _dual_clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, algo: AlgoConfig, c: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate whose loss for A < 0 is capped at c * |A|; also where the ratio
    clip binds and where the cap does."""
    per_token, clipped = _clipped_surrogate(ratio, advantages, algo)
    cap = -advantages * c
    capped = (advantages < 0) & (per_token > cap)
    return torch.where(capped, cap, per_token), clipped, capped


# ---- losses: fn(inputs, algo) -> LossOutput ----


def ppo_clip(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """PPO clipped surrogate with separate clip_low / clip_high (clip-higher when high > low)."""
    log_ratio = _log_ratio(inputs)
    ratio = log_ratio.exp()
    per_token, clipped = _clipped_surrogate(ratio, inputs.advantages, algo)
    metrics = _ratio_metrics(log_ratio, clipped, _below(ratio, inputs, algo), inputs)
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def dual_clip(inputs: LossInputs, algo: AlgoConfig, *, params: DualClipParams) -> LossOutput:
    """ppo_clip whose loss for a negative advantage is capped at c * |A| (Ye et al. 2020).

    With A < 0 the clipped surrogate -A r grows without bound in r, so one token whose
    probability rose a lot (stale data) can dominate a step; the cap makes its gradient zero.
    `dual_clip_frac` is the share of tokens so capped (verl's pg_clipfrac_lower).
    Reference: "Mastering Complex Control in MOBA Games with Deep RL" (arXiv:1912.09729);
    verl's compute_policy_loss_vanilla (clip_ratio_c).
    """
    log_ratio = _log_ratio(inputs)
    ratio = log_ratio.exp()
    per_token, clipped, capped = _dual_clipped_surrogate(ratio, inputs.advantages, algo, params.c)
    metrics = _ratio_metrics(log_ratio, clipped, _below(ratio, inputs, algo), inputs)
    metrics["dual_clip_frac"] = _token_avg(capped, inputs)
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def up(inputs: LossInputs, algo: AlgoConfig, *, params: DualClipParams) -> LossOutput:
    """UP (arXiv:2607.06987): unclipped REINFORCE where A > 0, dual_clip's surrogate where A <= 0.

    A positive token's term is -A * pi / sg(pi), the self-anchored ratio: its value is 1 and its
    gradient -A grad log pi, so a rare correct token is pushed with neither pi_old's anchor nor
    the upper clip. Negative tokens keep the clipped surrogate capped at params.c * |A|: the
    paper finds that lifting the bound on both signs collapses within ~25 steps. `clip_frac` and
    `dual_clip_frac` count only A <= 0 tokens, as A > 0 is never clipped (verl PR #7022).
    """
    log_ratio = _log_ratio(inputs)
    ratio, adv = log_ratio.exp(), inputs.advantages
    lp = _policy_logprobs(inputs)
    anchored = -adv * (lp - lp.detach()).exp()
    surrogate, clipped, capped = _dual_clipped_surrogate(ratio, adv, algo, params.c)
    positive = adv > 0
    metrics = _ratio_metrics(log_ratio, clipped & ~positive, _below(ratio, inputs, algo), inputs)
    metrics["dual_clip_frac"] = _token_avg(capped, inputs)
    per_token = torch.where(positive, anchored, surrogate)
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def gspo(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """GSPO: PPO clip on the sequence ratio s_i = exp(mean_t log r_t) (Qwen, arXiv:2507.18071).

    Token-level form of the paper (GSPO-token): r_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)], so
    the value is s_i on every token of sequence i while each token gets its own gradient
    s_i * grad log pi(y_t); with one advantage per sequence this equals sequence-level GSPO.
    Sequence ratios sit near 1, so clip_low / clip_high are set small (the paper: 3e-4 / 4e-4).
    The paper (and verl's compute_policy_loss_gspo) reduce with seq-mean-token-mean.
    """
    log_ratio = _log_ratio(inputs)  # 0 at padding, so a row sum is over policy tokens
    seq_log_ratio = log_ratio.sum(-1) / inputs.loss_mask.sum(-1).clamp(min=1.0)  # [B], log s_i
    lp = _policy_logprobs(inputs)
    token_log_ratio = (lp - lp.detach()) + seq_log_ratio.detach().unsqueeze(-1)
    ratio = token_log_ratio.exp()
    per_token, clipped = _clipped_surrogate(ratio, inputs.advantages, algo)
    metrics = _ratio_metrics(log_ratio, clipped, _below(ratio, inputs, algo), inputs)
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def gmpo(inputs: LossInputs, algo: AlgoConfig, *, params: GmpoParams) -> LossOutput:
    """GMPO: -A times the geometric mean of the sequence's clipped token ratios (arXiv:2507.20673).

    s_i = exp(mean_t c_t), c_t = log r_t clipped to [-params.clip, params.clip] on the pessimistic
    side only (PPO's min, taken per token in log space: above for A > 0, below for A < 0). Each
    token's term is -A_t s_i, which every aggregation sums per row like -mean_t(A_t) s_i (verl's
    geo_mean), and s_i's gradient spreads over all tokens of the sequence. The paper and verl
    take the plain mean over sequences: pair with seq-mean-token-mean (the paper's clip: 0.4).
    """
    log_ratio = _log_ratio(inputs)
    adv = _masked(inputs.advantages, inputs)  # s_i mixes the row's tokens: no NaN may enter
    sign = adv.sign()
    clipped = log_ratio.clamp(-params.clip, params.clip)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped)  # [B, T]
    lengths = inputs.loss_mask.sum(-1).clamp(min=1.0)
    seq_ratio = (_masked(pessimistic, inputs).sum(-1) / lengths).exp()  # [B], s_i
    lower = (adv < 0) & (log_ratio < -params.clip)
    binds = lower | ((adv > 0) & (log_ratio > params.clip))
    metrics = _ratio_metrics(log_ratio, binds, lower, inputs)
    return LossOutput(_aggregate(-adv * seq_ratio[:, None], inputs, algo), metrics)


def cispo(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """CISPO: REINFORCE weighted by a clipped, stop-gradient ratio (MiniMax-M1, arXiv:2506.13585).

    loss = -sg(clip(r, 1 - clip_low, 1 + clip_high)) * A * log pi. Unlike PPO no token ever
    loses its gradient; clipping only bounds its weight. The paper clips only from above:
    set clip_low >= 1 (no lower bound) and clip_high to e.g. 4 (weight at most 5).
    """
    log_ratio = _log_ratio(inputs)
    ratio = log_ratio.exp().detach()
    weight = ratio.clamp(1 - algo.clip_low, 1 + algo.clip_high)
    per_token = -weight * inputs.advantages * _policy_logprobs(inputs)
    metrics = _ratio_metrics(log_ratio, weight != ratio, _below(ratio, inputs, algo), inputs)
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def sapo(inputs: LossInputs, algo: AlgoConfig, *, params: SapoParams) -> LossOutput:
    """SAPO: a smooth sigmoid gate on the ratio instead of a hard clip (Qwen, arXiv:2511.20347).

    loss = -f(r) * A with f(r) = sigmoid(tau * (r - 1)) * 4 / tau, tau = params.tau_pos where
    A > 0 else params.tau_neg (as in the paper and verl's compute_policy_loss_sapo). The 4 / tau
    makes f'(1) = 1, so near r = 1 the gradient is the plain policy gradient; away from 1 it
    decays smoothly (faster for larger tau) rather than dropping to zero at a clip edge.
    """
    log_ratio = _log_ratio(inputs)
    adv = inputs.advantages
    tau = torch.where(adv > 0, adv.new_tensor(params.tau_pos), adv.new_tensor(params.tau_neg))
    gate = torch.sigmoid(tau * (log_ratio.exp() - 1)) * 4 / tau
    return LossOutput(
        _aggregate(-gate * adv, inputs, algo), {"ppo_kl": _token_avg(-log_ratio, inputs)}
    )


def dis(inputs: LossInputs, algo: AlgoConfig, *, params: DisParams) -> LossOutput:
    """DIS (SAO, arXiv:2607.07508): -sg(f(r) * A) * log pi, r = pi / pi_behaviour, f(r) = r inside
    its band (1 - clip_low, 1 + clip_high), else 0.

    Direct double-sided importance sampling: the ratio is to the engine's own sampling logprobs,
    with no recomputed pi_old. A token whose ratio leaves the band gets no gradient, but stays in
    the aggregation's denominator. `mask_frac` is the share of policy tokens so dropped,
    `clip_frac_lower` those with A < 0 below the band; `ppo_kl` is to the behaviour policy.
    """
    if inputs.behaviour_logprobs is None:
        raise ValueError(
            "loss 'dis' needs LossInputs.behaviour_logprobs (the engine's sampling logprobs), "
            "which the update fills from batch.behaviour_logprobs; got None."
        )
    log_ratio = _masked(inputs.logprobs - inputs.behaviour_logprobs, inputs).clamp(-20, 20)
    ratio = log_ratio.detach().exp()
    low = ratio <= 1 - params.clip_low
    inside = ~low & (ratio < 1 + params.clip_high)
    weight = torch.where(inside, ratio, 0.0) * inputs.advantages
    metrics = {
        "mask_frac": _token_avg(~inside, inputs),
        "clip_frac_lower": _token_avg(low & (inputs.advantages < 0), inputs),
        "ppo_kl": _token_avg(-log_ratio, inputs),
    }
    return LossOutput(_aggregate(-weight * _policy_logprobs(inputs), inputs, algo), metrics)


def dro(inputs: LossInputs, algo: AlgoConfig, *, params: DroParams) -> LossOutput:
    """DRO: -(A log pi - beta / 2 (log pi - log pi_old)^2), a proximal penalty, no clip.

    As verl's dro loss; the penalty's log-ratio is not clamped (it is squared, not exponentiated).
    """
    delta = _masked(inputs.logprobs - inputs.old_logprobs, inputs)  # unclamped: it is squared
    per_token = -(inputs.advantages * _policy_logprobs(inputs) - params.beta / 2 * delta**2)
    return LossOutput(
        _aggregate(per_token, inputs, algo), {"ppo_kl": _token_avg(-_log_ratio(inputs), inputs)}
    )


def _dppo(
    inputs: LossInputs, algo: AlgoConfig, params: DppoParams, inside: torch.Tensor
) -> LossOutput:
    """-A sg(min(r, params.ratio_cap)) log pi on the tokens `inside` the trust region, 0 elsewhere.
    Dropped tokens stay in the denominator; `clip_frac` is their share, `clip_frac_lower` that of
    those with A < 0 (their probability fell too far)."""
    log_ratio = _log_ratio(inputs)
    weight = torch.where(inside, log_ratio.detach().exp().clamp(max=params.ratio_cap), 0.0)
    per_token = -inputs.advantages * weight * _policy_logprobs(inputs)
    lower = ~inside & (inputs.advantages < 0)
    return LossOutput(
        _aggregate(per_token, inputs, algo), _ratio_metrics(log_ratio, ~inside, lower, inputs)
    )


def _old_and_new(inputs: LossInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi_old and log pi of the sampled tokens, without grad (0 at padding)."""
    return _masked(inputs.old_logprobs, inputs), _policy_logprobs(inputs).detach()


def dppo_tv(inputs: LossInputs, algo: AlgoConfig, *, params: DppoTvParams) -> LossOutput:
    """DPPO-Binary-TV (arXiv:2602.04879): policy gradient inside a |pi - pi_old| trust region.

    A token's gradient is dropped where pi - pi_old moved past params.tv_delta in the direction
    its advantage pushes (a total-variation region, not a ratio)."""
    p_old, p = (x.exp() for x in _old_and_new(inputs))
    inside = torch.where(
        inputs.advantages > 0, p - p_old <= params.tv_delta, p - p_old >= -params.tv_delta
    )
    return _dppo(inputs, algo, params, inside)


def dppo_kl(inputs: LossInputs, algo: AlgoConfig, *, params: DppoKlParams) -> LossOutput:
    """DPPO-Binary-KL (arXiv:2602.04879): policy gradient inside a Bernoulli-KL trust region.

    A token's gradient is dropped where p_old log(p_old/p) + (1-p_old) log((1-p_old)/(1-p))
    passes params.kl_delta while p moves in the direction its advantage pushes."""
    log_old, log_new = _old_and_new(inputs)
    p_old, p = log_old.exp(), log_new.exp()
    eps = 1e-8  # 1 - p is 0 for a certain token; the paper's code adds the same
    binary_kl = p_old * (log_old - log_new) + (1 - p_old) * torch.log(
        (1 - p_old + eps) / (1 - p + eps)
    )
    near = binary_kl <= params.kl_delta
    inside = torch.where(inputs.advantages > 0, near | (p <= p_old), near | (p >= p_old))
    return _dppo(inputs, algo, params, inside)


def _covariance(inputs: LossInputs) -> torch.Tensor:
    """(A - mean A)(log pi - mean log pi) per policy token [B, T], without grad, the means over
    this micro-batch's policy tokens; -inf off the mask, so no ranking ever picks padding."""
    mask = inputs.loss_mask.bool()
    count = mask.sum().clamp(min=1)
    adv, lp = _masked(inputs.advantages, inputs), _policy_logprobs(inputs).detach()
    cov = (adv - adv.sum() / count) * (lp - lp.sum() / count)
    return torch.where(mask, cov, -torch.inf)


def kl_cov(inputs: LossInputs, algo: AlgoConfig, *, params: KlCovParams) -> LossOutput:
    """KL-Cov (arXiv:2505.22617): -A r plus a |log r| penalty on the top-covariance tokens.

    The penalty, params.coef |log r|, is on the params.ratio share of policy tokens (at least
    one) with the largest covariance of A and log pi. As in the paper's code, tokens are ranked
    within each micro-batch, so unlike the other losses this one depends on
    train.micro_batch_size. `cov_frac` is the penalised share.
    """
    log_ratio = _log_ratio(inputs)
    cov = _covariance(inputs)
    count = int(inputs.loss_mask.bool().sum())
    chosen = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if count:
        chosen[cov.flatten().topk(max(1, int(count * params.ratio))).indices] = True
    chosen = chosen.view(cov.shape)
    penalty = torch.where(chosen, params.coef * log_ratio.abs(), 0.0)
    per_token = -inputs.advantages * log_ratio.exp() + penalty
    metrics = {"cov_frac": _token_avg(chosen, inputs), "ppo_kl": _token_avg(-log_ratio, inputs)}
    return LossOutput(_aggregate(per_token, inputs, algo), metrics)


def clip_cov(inputs: LossInputs, algo: AlgoConfig, *, params: ClipCovParams) -> LossOutput:
    """Clip-Cov (arXiv:2505.22617): PPO clip, with no gradient for a few high-covariance tokens.

    params.ratio of the policy tokens (at least one) are drawn at random among those not
    clipped whose covariance of A and log pi lies in (params.lb, params.ub).

    As in the paper's code, the covariance is taken within each micro-batch (this loss depends
    on train.micro_batch_size), the draw uses torch's global generator, and a dropped token's
    loss is 0 but it stays in the denominator; `cov_frac` is the dropped share.
    """
    log_ratio = _log_ratio(inputs)
    ratio = log_ratio.exp()
    per_token, clipped = _clipped_surrogate(ratio, inputs.advantages, algo)
    cov = _covariance(inputs)
    eligible = (cov > params.lb) & (cov < params.ub) & ~clipped
    candidates = torch.nonzero(eligible.flatten()).squeeze(1)
    count = int(inputs.loss_mask.bool().sum())
    dropped = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if len(candidates):
        take = max(1, int(count * params.ratio))
        dropped[candidates[torch.randperm(len(candidates), device=cov.device)[:take]]] = True
    dropped = dropped.view(cov.shape)
    metrics = _ratio_metrics(log_ratio, clipped, _below(ratio, inputs, algo), inputs)
    metrics["cov_frac"] = _token_avg(dropped, inputs)
    return LossOutput(_aggregate(torch.where(dropped, 0.0, per_token), inputs, algo), metrics)


def reinforce(inputs: LossInputs, algo: AlgoConfig) -> LossOutput:
    """Plain on-policy policy gradient, -A * log pi (ignores old logprobs; no clipping)."""
    per_token = -inputs.advantages * _policy_logprobs(inputs)
    return LossOutput(
        _aggregate(per_token, inputs, algo), {"ppo_kl": _token_avg(-_log_ratio(inputs), inputs)}
    )


def soft_q(inputs: LossInputs, algo: AlgoConfig, *, params: SoftQParams) -> LossOutput:
    """Token-level soft Q-learning with the logits as Q (pair with advantage soft_bellman).

    Q(s, a) = beta (x(s, a) - x_ref(s, a)) on the logits x: zero at the start, and the
    Boltzmann policy pi_ref exp(Q / beta) of this Q is softmax(x), the policy itself. Each
    policy token regresses Q(s_t, a_t) on its Bellman target (inputs.advantages): 1/2 (Q -
    target)^2. The targets come from the pre-update policy, so any logged trajectory trains it
    with no importance ratio (offline, as ILQL); a token's Q has log pi's gradient plus the
    normaliser's, which moves the state's value V(s) = beta (logsumexp x - logsumexp x_ref).
    params.beta must equal soft_bellman's, which reads the targets' Q the same way.
    """
    missing = [n for n in soft_q.requires if getattr(inputs, n) is None]
    if missing:
        raise ValueError(
            f"loss 'soft_q' needs LossInputs.{', '.join(missing)}, which the update fills when "
            "the loss lists them in soft_q.requires; got None."
        )
    logits = inputs.logprobs + inputs.normaliser  # x(s_t, a_t), up to the temperature
    ref_logits = inputs.ref_logprobs + inputs.ref_normaliser
    q = _masked(params.beta * (logits - ref_logits), inputs)
    error = q - _masked(inputs.advantages, inputs)
    metrics = {
        "q/mean": _token_avg(q, inputs),
        "q/abs_error": _token_avg(error.abs(), inputs),
        "ppo_kl": _token_avg(-_log_ratio(inputs), inputs),
    }
    return LossOutput(_aggregate(0.5 * error**2, inputs, algo), metrics)


soft_q.requires = ("normaliser", "ref_logprobs", "ref_normaliser")
soft_q.q_targets = True  # reads soft_bellman's regression targets, not advantages
for _fn in (dual_clip, up):
    _fn.Params = DualClipParams
sapo.Params = SapoParams
gmpo.Params = GmpoParams
dis.Params = DisParams
dro.Params = DroParams
dppo_tv.Params = DppoTvParams
dppo_kl.Params = DppoKlParams
kl_cov.Params = KlCovParams
clip_cov.Params = ClipCovParams
soft_q.Params = SoftQParams


# fn(per-token values [B, T], inputs) -> scalar; masks and normalisers come from the inputs
AggregateFn = Callable[[torch.Tensor, LossInputs | Normalisers], torch.Tensor]
AGGREGATIONS: dict[str, AggregateFn] = {
    "token-mean": token_mean,
    "token-sum": token_sum,
    "seq-mean-token-sum": seq_mean_token_sum,
    "seq-mean-token-mean": seq_mean_token_mean,
    "seq-mean-token-sum-norm": seq_mean_token_sum_norm,
}

LossFn = Callable[[LossInputs, AlgoConfig], LossOutput]
LOSSES: dict[str, LossFn] = {
    "ppo_clip": ppo_clip,
    "dual_clip": dual_clip,
    "up": up,
    "gspo": gspo,
    "gmpo": gmpo,
    "cispo": cispo,
    "sapo": sapo,
    "dis": dis,
    "dro": dro,
    "dppo_tv": dppo_tv,
    "dppo_kl": dppo_kl,
    "kl_cov": kl_cov,
    "clip_cov": clip_cov,
    "reinforce": reinforce,
    "soft_q": soft_q,
}

# Each token's term is its advantage times a function of the ratio, so a row whose advantages
# are all 0 adds no gradient and the update may skip it (train.skip_zero_advantage). Not so for
# dro's proximal penalty, the covariance losses (a row's tokens shift a micro-batch's mean) or
# soft_q (regression targets, not advantages).
for name in "ppo_clip dual_clip up gspo gmpo cispo sapo dis dppo_tv dppo_kl reinforce".split():
    LOSSES[name].advantage_weighted = True
