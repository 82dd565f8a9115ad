"""Rollout/training mismatch: truncated importance sampling weights and the metrics that expose it."""

from __future__ import annotations

import torch


def mismatch_metrics(
    train_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> dict[str, float]:
    """How far the engine's sampling logprobs are from the trainer's, per policy token. [B, T] each.
    Tokens whose sampling logprob is unknown (NaN: a replayed log's) are left out."""
    on = loss_mask.bool() & behaviour_logprobs.isfinite()
    if not on.any():
        return {}
    diff = (train_logprobs - behaviour_logprobs)[on]
    ratio = diff.clamp(-20, 20).exp()
    q05, q50, q95 = torch.quantile(
        ratio.double(), torch.tensor([0.05, 0.5, 0.95], dtype=torch.double)
    )
    return {
        "mismatch/abs_diff_mean": float(diff.abs().mean()),
        "mismatch/abs_diff_max": float(diff.abs().max()),
        "mismatch/ratio_p05": float(q05),
        "mismatch/ratio_p50": float(q50),
        "mismatch/ratio_p95": float(q95),
    }


def truncated_is_weights(
    train_logprobs: torch.Tensor,  # [B, T] the training model's logprobs of the sampled tokens
    behaviour_logprobs: torch.Tensor,  # [B, T] the engine's logprobs of the same tokens
    loss_mask: torch.Tensor,  # [B, T]
    level: str,
    cap: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance weights pi_train / pi_engine, truncated at `cap` (Yao et al., 2025: TIS).

    `token` weighs each token by its own ratio; `sequence` weighs every token of a sequence by
    the product of its ratios; `sequence_mask` (C3PO) keeps a sequence's ratio where it lies in
    [1 / cap, cap] and drops the sequence (weight 0) elsewhere. Zero off the mask; no gradient
    flows through them.
    """
    log_ratio = ((train_logprobs - behaviour_logprobs) * loss_mask).clamp(-20, 20)
    if level in ("sequence", "sequence_mask"):
        log_ratio = log_ratio.sum(-1, keepdim=True).clamp(-20, 20).expand_as(loss_mask)
    elif level != "token":
        raise ValueError(
            f"truncated IS level must be 'token', 'sequence' or 'sequence_mask', got {level!r}"
        )
    ratio = log_ratio.exp()
    tokens = loss_mask.sum().clamp(min=1)
    if level == "sequence_mask":
        outside = (ratio < 1 / cap) | (ratio > cap)
        weights = ratio.masked_fill(outside, 0.0) * loss_mask
        return weights.detach(), {
            "mismatch/masked_share": float((outside.float() * loss_mask).sum() / tokens)
        }
    weights = ratio.clamp(max=cap) * loss_mask
    capped = ((ratio > cap).float() * loss_mask).sum() / tokens
    return weights.detach(), {"mismatch/truncated_share": float(capped)}
