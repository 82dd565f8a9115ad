"""Entropy of a model's replies, per token and per sequence: how spread out the policy is at each
stage of its training (pretraining / warm start, SFT, RL)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from rlvr.models.logprobs import token_logprobs
from rlvr.types import Batch, Trajectory

ROWS_PER_PASS = 32  # bounds the logits of one forward pass


def entropy_summary(token_entropy: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Per-token entropy (mean over reply tokens) and per-sequence entropy (sum over a reply's
    tokens, mean over replies) of entropies [B, T] on the reply positions of mask [B, T]."""
    masked = token_entropy * mask
    return {
        "entropy/token": float(masked.sum() / mask.sum().clamp(min=1)),
        "entropy/sequence": float(masked.sum(-1).mean()),
    }


@torch.no_grad()
def reply_entropy(
    model: PreTrainedModel, trajectories: list[Trajectory], pad_id: int, temperature: float = 1.0
) -> dict[str, float]:
    """entropy_summary of the model's predictive entropy at every token of sampled replies
    (e.g. an EpisodeRunner's trajectories), with logits scaled as the sampler scaled them."""
    batch = Batch.from_trajectories(trajectories, pad_id)
    entropy = torch.zeros_like(batch.loss_mask)
    model.eval()
    for start in range(0, len(batch), ROWS_PER_PASS):
        rows = slice(start, start + ROWS_PER_PASS)
        _, part = token_logprobs(
            model, batch.input_ids[rows], batch.attention_mask[rows], temperature, with_entropy=True
        )
        entropy[rows] = part.float().cpu()
    return entropy_summary(entropy, batch.loss_mask)
