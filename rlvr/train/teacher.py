"""Direct-OPD's teachers (arXiv 2607.05394): per-token implicit rewards log pi_teacher -
log pi_teacher_ref on the student's own samples, which carry an RL gain from one model to another
with no verifier; without a teacher_ref, on-policy distillation from the teacher."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import AlgoConfig, ConfigError
from rlvr.models.loading import load_frozen
from rlvr.models.logprobs import Gather
from rlvr.train.batching import by_length
from rlvr.train.update import (
    TeacherTopK,
    batch_logprobs,
    expected_implicit_reward,
    micro_logprobs,
    trim,
)
from rlvr.types import Batch


def implicit_rewards(
    teacher: torch.Tensor, baseline: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """[B, T-1] log pi_teacher(a_t) - log pi_baseline(a_t) on the policy's tokens, 0 elsewhere."""
    return (teacher - baseline) * loss_mask


@torch.no_grad()
def gathered_logprobs(
    model: PreTrainedModel,
    batch: Batch,
    gather_ids: torch.Tensor | int,
    micro: int,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ids and logprobs [B, T-1, k] under `model`: of the given ids, or of its own k most likely
    tokens at every position when `gather_ids` is k; 0 at padding."""
    k = gather_ids if isinstance(gather_ids, int) else gather_ids.shape[-1]
    ids = torch.zeros((*batch.loss_mask.shape, k), dtype=torch.long)
    out = torch.zeros((*batch.loss_mask.shape, k))
    everything = torch.arange(len(batch))
    for rows in by_length(everything, batch.attention_mask.sum(-1)).split(micro):
        width = trim(rows, batch.attention_mask) - 1
        gather = Gather(k=k) if isinstance(gather_ids, int) else Gather(gather_ids[rows, :width])
        micro_logprobs(model, batch, rows, temperature, None, gather=gather)
        ids[rows, :width] = gather.ids.cpu()
        out[rows, :width] = gather.logprobs.float().cpu()
    return ids, out


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

    def top_k(
        self, student: PreTrainedModel, batch: Batch, k: int, micro: int, temperature: float
    ) -> tuple[TeacherTopK, torch.Tensor]:
        """The student's k most likely tokens at every reply position with the teacher's implicit
        reward of each (algo.teacher_top_k), for the update's exact expectation; and that
        expectation [B, T-1] under the student as it is now, 0 off the reply."""
        ids, own = gathered_logprobs(student, batch, k, micro, temperature)
        _, teacher = gathered_logprobs(self.models["teacher"], batch, ids, micro, temperature)
        top_k = TeacherTopK(ids, teacher, reverse_kl=True)
        if "teacher_ref" in self.models:
            _, ref = gathered_logprobs(self.models["teacher_ref"], batch, ids, micro, temperature)
            top_k = TeacherTopK(ids, teacher - ref, reverse_kl=False)
        expected = expected_implicit_reward(own, top_k.rewards, top_k.reverse_kl)
        return top_k, expected * batch.loss_mask
