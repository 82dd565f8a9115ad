"""The frozen reference policy behind one small interface (a copy now; LoRA's disabled adapters later)."""

from __future__ import annotations

import copy

import torch
from transformers import PreTrainedModel

from rlvr.train.update import batch_logprobs
from rlvr.types import Batch


class ReferencePolicy:
    """Logprobs of the policy as it was when training started."""

    def __init__(self, policy: PreTrainedModel):
        self.model = copy.deepcopy(policy).eval()
        self.model.requires_grad_(False)

    @torch.no_grad()
    def logprobs(self, batch: Batch, micro_batch_size: int, temperature: float) -> torch.Tensor:
        return batch_logprobs(self.model, batch, micro_batch_size, temperature)
