"""Teacher-forced per-token logprobs (and entropy) of a causal LM on a right-padded batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,  # [B, T]
    attention_mask: torch.Tensor,  # [B, T]
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logprobs [B, T-1] of tokens 1..T-1 under the model (logits scaled like the sampler's),
    and their predictive entropy [B, T-1] when asked (with grad only for an entropy bonus)."""
    device = model.device
    logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits
    logits = logits[:, :-1].float()
    if temperature > 0:
        logits = logits / temperature
    logprobs = F.log_softmax(logits, dim=-1)
    chosen = logprobs.gather(-1, input_ids[:, 1:, None].to(device)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logprobs.exp() * logprobs).sum(-1)
    return chosen, entropy
