"""Direct-OPD's teachers (arXiv 2607.05394): per-token implicit rewards log pi_teacher -
log pi_teacher_ref on the student's own samples, which carry an RL gain from one model to another
with no verifier; without a teacher_ref, on-policy distillation from the teacher."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from rlvr.config import AlgoConfig, ConfigError
from rlvr.models.loading import load_frozen
from rlvr.train.update import batch_logprobs
from rlvr.types import Batch


def implicit_rewards(
    teacher: torch.Tensor, baseline: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """[B, T-1] log pi_teacher(a_t) - log pi_baseline(a_t) on the policy's tokens, 0 elsewhere."""
    return (teacher - baseline) * loss_mask


class Teacher:
    """Frozen teacher (and teacher_ref) models that score the policy's sampled tokens, or one
    teacher per domain (algo.domain_teachers) that scores the samples of its own domain."""

    def __init__(
        self, algo: AlgoConfig, tokenizer: PreTrainedTokenizerBase, device, domains: set[str]
    ):
        unknown = sorted(set(algo.domain_teachers) - domains)
        if unknown:
            raise ConfigError(
                f"algo.domain_teachers names {', '.join(unknown)}, which no problem of this task "
                f"belongs to. Fix: use the task's domains: {', '.join(sorted(domains))}"
            )
        self.models = {}
        for key in ("teacher", "teacher_ref"):
            path = getattr(algo, key)
            if not path:
                continue
            self.models[key] = load_frozen(path, f"algo.{key}", tokenizer, device)
        self.by_domain = {
            domain: load_frozen(path, f"algo.domain_teachers.{domain}", tokenizer, device)
            for domain, path in algo.domain_teachers.items()
        }

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

        def logprobs(model, rows: Batch) -> torch.Tensor:
            return batch_logprobs(model, rows, micro_batch_size, temperature, share_prompt)

        if self.by_domain:  # rows of a domain without a teacher keep the student's: reward 0
            teacher = student_logprobs.clone()
            for domain, model in self.by_domain.items():
                index = [i for i, d in enumerate(batch.domains) if d == domain]
                if index:
                    teacher[index] = logprobs(model, batch.rows(index))
            return implicit_rewards(teacher, student_logprobs, batch.loss_mask)
        teacher = logprobs(self.models["teacher"], batch)
        baseline = (
            logprobs(self.models["teacher_ref"], batch)
            if "teacher_ref" in self.models
            else student_logprobs
        )
        return implicit_rewards(teacher, baseline, batch.loss_mask)
