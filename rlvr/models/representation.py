"""RepExp's representation of a rollout (arXiv 2510.11686): a model's last-layer hidden state
averaged over the response, sparsely projected to a few dimensions for the elliptical bonus."""

from __future__ import annotations

import numpy as np
import torch

from rlvr.types import Batch


def backbone(model) -> torch.nn.Module:
    """The decoder stack under the LM head (LlamaModel in LlamaForCausalLM, found through a peft
    wrapper too): its output is the final-norm hidden states, with no vocabulary projection."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    stack = getattr(inner, "base_model", inner)
    if stack is inner:
        raise ValueError(
            f"{type(inner).__name__} names no decoder stack (base_model_prefix); the elliptical "
            "bonus reads its last hidden states: use a Hugging Face causal LM, or set "
            "algo.elliptical_beta=0"
        )
    return stack


@torch.no_grad()
def response_hidden_means(model, batch: Batch, micro_batch_size: int) -> torch.Tensor:
    """float32 [B, H]: each row's last hidden state averaged over its policy tokens (every turn's),
    read where the token is the input, as the paper's mean over response positions."""
    stack = backbone(model)
    lengths = batch.attention_mask.sum(-1)
    # [B, T]: position t holds token t, and loss_mask column t describes token t + 1
    response = torch.cat([torch.zeros_like(batch.loss_mask[:, :1]), batch.loss_mask], -1)
    out = torch.zeros(len(batch), model.config.hidden_size)
    for rows in lengths.argsort().split(micro_batch_size):  # similar lengths pad each other less
        width = int(lengths[rows].max())
        hidden = stack(
            input_ids=batch.input_ids[rows, :width].to(model.device),
            attention_mask=batch.attention_mask[rows, :width].to(model.device),
        ).last_hidden_state.float()
        weights = response[rows, :width].to(hidden.device)
        sums = (hidden * weights[..., None]).sum(1)
        out[rows] = (sums / weights.sum(1, keepdim=True).clamp(min=1)).cpu()
    return out


def sparse_projection(hidden_size: int, dim: int, seed: int) -> torch.Tensor:
    """[hidden_size, dim]: scikit-learn's sparse random projection (Achlioptas / Li, density
    1/sqrt(hidden_size)), drawn from `seed`, which preserves distances up to a small distortion."""
    # Imported here: scikit-learn (with scipy and pandas) adds 1.5 s to every run's start-up,
    # and only RepExp's bonus draws a projection.
    from sklearn.random_projection import SparseRandomProjection

    projection = SparseRandomProjection(dim, density="auto", random_state=seed)
    projection.fit(np.zeros((1, hidden_size)))
    return torch.from_numpy(projection.components_.toarray().T).float()


def step_seed(seed: int, step: int) -> int:
    """The projection's seed at a step: a fresh draw each step, the same on a resumed run."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1)[0])
