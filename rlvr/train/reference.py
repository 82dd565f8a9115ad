"""The frozen reference policy behind one small interface: a copy of the starting policy, or,
for a LoRA policy, the policy itself with its adapters disabled (no second copy): the KL term's
logprobs, and the starting policy a method reads (RepExp's hidden states)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import PreTrainedModel

from rlvr.models.lora import adapters_disabled, is_lora
from rlvr.train.update import batch_logprobs
from rlvr.types import Batch


class ReferencePolicy:
    """Logprobs of the policy as it was when training started."""

    def __init__(self, policy: PreTrainedModel):
        self.shared = is_lora(policy)  # the frozen base under the adapters is the reference
        if self.shared:
            self.model = policy
        else:
            self.model = copy.deepcopy(policy).eval()
            self.model.requires_grad_(False)

    @contextmanager
    def frozen(self) -> Iterator[PreTrainedModel]:
        """Within: the starting policy, in eval mode."""
        if not self.shared:
            yield self.model
            return
        was_training = self.model.training
        self.model.eval()  # as the copy is: no dropout in the base
        try:
            with adapters_disabled(self.model):
                yield self.model
        finally:
            self.model.train(was_training)

    @torch.no_grad()
    def logprobs(
        self,
        batch: Batch,
        micro_batch_size: int,
        temperature: float,
        share_prompt: bool = True,
        normaliser: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, T-1]; a given `normaliser` [B, T-1] receives each position's logsumexp."""
        with self.frozen() as model:
            return batch_logprobs(
                model, batch, micro_batch_size, temperature, share_prompt, normaliser=normaliser
            )
