"""Direct-OPD's teachers (arXiv 2607.05394): per-token implicit rewards log pi_teacher -
log pi_teacher_ref on the student's own samples, which carry an RL gain from one model to another
with no verifier; without a teacher_ref, on-policy distillation from the teacher."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from rlvr.config import AlgoConfig
from rlvr.models.loading import load_frozen
from rlvr.train.update import batch_logprobs
from rlvr.types import Batch


def implicit_rewards(
    teacher: torch.Tensor, baseline: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """[B, T-1] log pi_teacher(a_t) - log pi_baseline(a_t) on the policy's tokens, 0 elsewhere."""
    return (teacher - baseline) * loss_mask


class Teacher:
    """Frozen teacher (and teacher_ref) models that score the policy's sampled tokens."""

    def __init__(self, algo: AlgoConfig, tokenizer: PreTrainedTokenizerBase, device):
        self.models = {}
        for key in ("teacher", "teacher_ref"):
            path = getattr(algo, key)
            if not path:
                continue
            self.models[key] = load_frozen(path, f"algo.{key}", tokenizer, device)

    @torch.no_grad()
    def token_rewards(
        self,
        batch: Batch,
        student_logprobs: torch.Tensor,
        micro_batch_size: int,
        temperature: float,
        share_prompt: bool,
    ) -> torch.Tensor:
        """[B, T-1] implicit rewards; against the student's own logprobs without a teacher_ref
        (the negative per-token reverse KL of on-policy distillation)."""

        def logprobs(key: str) -> torch.Tensor:
            return batch_logprobs(
                self.models[key], batch, micro_batch_size, temperature, share_prompt
            )

        teacher = logprobs("teacher")
        baseline = logprobs("teacher_ref") if "teacher_ref" in self.models else student_logprobs
        return implicit_rewards(teacher, baseline, batch.loss_mask)
