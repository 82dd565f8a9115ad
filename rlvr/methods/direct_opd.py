"""Direct-OPD (arXiv 2607.05394): per-token implicit rewards log pi_teacher - log pi_teacher_ref on
the student's own samples carry an RL gain from one model to another with no verifier; without a
teacher_ref, on-policy distillation from the teacher; with domain_teachers, one per domain."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from pydantic import Field
from transformers import PreTrainedModel

from rlvr.config import ConfigError
from rlvr.models.loading import load_frozen
from rlvr.models.logprobs import Gather, autocast
from rlvr.train.batching import by_length
from rlvr.train.hooks import Method, MethodParams, Run, Step
from rlvr.train.profile import timed
from rlvr.train.update import UpdateInputs, batch_logprobs, micro_logprobs, trim
from rlvr.types import Batch


class Params(MethodParams):
    teacher: str = Field(
        "",
        description="A model (directory or hub id, the policy's tokenizer) whose logprob of "
        "each sampled token, minus teacher_ref's, joins that token's reward (times coef); '' = "
        "none (then domain_teachers). Without a teacher_ref, the policy's own logprob is "
        "subtracted: on-policy distillation (the negative per-token reverse KL).",
    )
    teacher_ref: str = Field(
        "",
        description="The teacher before its RL run, so the reward is the shift RL made "
        "(log pi_teacher - log pi_teacher_ref); '' = distil the teacher itself.",
    )
    coef: float = Field(1.0, gt=0, description="Weight of the per-token implicit reward.")
    top_k: int = Field(
        0,
        ge=0,
        description="The Rao-Blackwellised estimator: at every reply position, the implicit "
        "reward's expectation over the policy's k most likely tokens, a loss term whose "
        "gradient is exact over them, instead of the one sampled token's reward (which then "
        "joins no reward); 0 = the sampled token's.",
    )
    kl_coefs: list[float] = Field(
        default_factory=list,
        description="The KL coefficient (to the frozen start, with algo.kl_estimator) keyed on "
        "the sign of the batch's mean implicit reward: [when below 0, when 0 or above]; [] = "
        "algo.kl_coef throughout.",
    )
    domain_teachers: dict[str, str] = Field(
        default_factory=dict,
        description="Multi-teacher on-policy distillation: {domain: teacher (directory or hub "
        "id, the policy's tokenizer)}; each sampled token of a problem of that domain (a mix "
        "task's domain names) gains coef * (log pi_teacher - log pi_policy); samples of other "
        "domains gain nothing. Instead of teacher.",
    )


def implicit_rewards(
    teacher: torch.Tensor, baseline: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """[B, T-1] log pi_teacher(a_t) - log pi_baseline(a_t) on the policy's tokens, 0 elsewhere."""
    return (teacher - baseline) * loss_mask


def expected_implicit_reward(
    student: torch.Tensor, rewards: torch.Tensor, reverse_kl: bool
) -> torch.Tensor:
    """[B, T-1] sum over each position's k tokens of pi_student(v) * r(v): the Rao-Blackwellised
    implicit reward, exact over those tokens instead of read at the one sampled. `student`
    [B, T-1, k] holds the student's logprobs of them; with `reverse_kl` they are subtracted from
    `rewards` (the teacher's logprobs), which makes it minus the reverse KL over the k tokens."""
    if reverse_kl:
        rewards = rewards - student
    return (student.exp() * rewards).sum(-1)


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


@dataclass
class TopKDistillation:
    """The loss term of the top-k estimator: ids [B, T-1, k] of the student's likeliest tokens at
    every reply position and each one's implicit reward [B, T-1, k] (the teacher's logprob minus
    the teacher_ref's, or with `reverse_kl` the teacher's alone: the student's own is subtracted
    live); the loss gains -coef * their expectation under the student as it trains."""

    ids: torch.Tensor
    rewards: torch.Tensor
    reverse_kl: bool
    coef: float

    def gather_ids(self, rows: torch.Tensor, width: int) -> torch.Tensor:
        return self.ids[rows, :width]

    def __call__(self, logprobs, rows, width, inputs, aggregate) -> tuple[torch.Tensor, dict]:
        rewards = self.rewards[rows, :width].to(logprobs.device)
        expected = aggregate(expected_implicit_reward(logprobs, rewards, self.reverse_kl), inputs)
        return -self.coef * expected, {"teacher/expected_reward": expected.item()}


class DirectOPD(Method):
    """Direct-OPD (arXiv 2607.05394): frozen teachers' implicit reward on each sampled token
    joins its reward, or (top_k) the loss as an exact expectation; the KL may key on its sign."""

    Params = Params

    @classmethod
    def check(cls, params: Params, cfg, task) -> None:
        p, key = params, "methods.direct_opd"
        if bool(p.teacher) == bool(p.domain_teachers):
            raise ConfigError(
                f"{key} distils from {key}.teacher or from {key}.domain_teachers (one per "
                "domain); fix: set exactly one of them"
            )
        if (p.top_k or p.kl_coefs or p.teacher_ref) and not p.teacher:
            raise ConfigError(
                f"{key}.top_k, .kl_coefs and .teacher_ref shape {key}.teacher's implicit reward, "
                "but it is not set (domain_teachers take none of them); fix: drop them"
            )
        if p.kl_coefs and (len(p.kl_coefs) != 2 or min(p.kl_coefs) < 0 or cfg.algo.kl_target):
            raise ConfigError(
                f"{key}.kl_coefs = {p.kl_coefs}: it takes two coefficients, [when the batch's "
                "implicit reward is below 0, when at or above], each >= 0, and no "
                f"algo.kl_target; fix: e.g. {key}.kl_coefs=[0.0, 0.1]"
            )
        if cfg.rollout.replay:  # Parason's dispatch, which splits replies, refuses it itself
            raise ConfigError(
                f"{key} scores sampled tokens by their logprobs under the student, which "
                f"rollout.replay's logged replies lack; fix: rollout.replay='' (or {key}=null)"
            )
        domains = {problem.domain for problem in task.eval_problems()}
        if unknown := sorted(set(p.domain_teachers) - domains):
            raise ConfigError(
                f"{key}.domain_teachers names {', '.join(unknown)}, which no problem of this "
                f"task belongs to. Fix: use the task's domains: {', '.join(sorted(domains))}"
            )

    def uses_kl(self) -> bool:
        return any(self.params.kl_coefs)

    def setup(self, run: Run) -> None:
        p, tokenizer, device = self.params, run.tokenizer, run.model.device
        key = "methods.direct_opd"
        self.student = run.model
        self.models = {
            name: load_frozen(path, f"{key}.{name}", tokenizer, device)
            for name, path in (("teacher", p.teacher), ("teacher_ref", p.teacher_ref))
            if path
        }
        self.by_domain = {
            domain: load_frozen(path, f"{key}.domain_teachers.{domain}", tokenizer, device)
            for domain, path in p.domain_teachers.items()
        }
        self.term: TopKDistillation | None = None
        self.mean_reward = 0.0

    def token_rewards(self, step: Step, student: torch.Tensor) -> torch.Tensor | None:
        """The implicit reward of each sampled token, or (top_k) None: it joins the loss."""
        cfg, batch = self.cfg, step.batch
        with (
            timed(step.timings, "time/teacher_logprobs"),
            autocast(cfg.train.autocast, self.student.device),
        ):
            if self.params.top_k:
                self.term, implicit = self.top_k(batch)
            else:
                implicit = self.implicit(step, student)
        self.mean_reward = float(implicit.sum() / batch.loss_mask.sum().clamp(min=1))
        step.metrics["teacher/token_reward"] = self.mean_reward
        step.metrics["teacher/sequence_reward"] = float(implicit.sum(-1).mean())
        return None if self.params.top_k else self.params.coef * implicit

    def kl_coef(self, step: Step, coef: float) -> float:
        kl_coefs = self.params.kl_coefs
        return kl_coefs[self.mean_reward >= 0] if kl_coefs else coef

    def update_inputs(self, step: Step, data: UpdateInputs) -> None:
        if self.term is not None:
            data.terms.append(self.term)
            self.term = None

    @torch.no_grad()
    def implicit(self, step: Step, student: torch.Tensor) -> torch.Tensor:
        """[B, T-1] implicit rewards; against the student's own logprobs without a teacher_ref
        (the negative per-token reverse KL of on-policy distillation)."""
        cfg, batch = self.cfg, step.batch
        micro, temperature = cfg.train.micro_batch_size, cfg.rollout.temperature

        def logprobs(model, rows: Batch) -> torch.Tensor:
            return batch_logprobs(model, rows, micro, temperature, cfg.train.share_prompt)

        if self.by_domain:  # rows of a domain without a teacher keep the student's: reward 0
            teacher = student.clone()
            domains = [t.problem.domain for t in step.trajectories]
            for domain, model in self.by_domain.items():
                index = [i for i, d in enumerate(domains) if d == domain]
                if index:
                    teacher[index] = logprobs(model, batch.rows(index))
            return implicit_rewards(teacher, student, batch.loss_mask)
        teacher = logprobs(self.models["teacher"], batch)
        ref = self.models.get("teacher_ref")
        baseline = student if ref is None else logprobs(ref, batch)
        return implicit_rewards(teacher, baseline, batch.loss_mask)

    def top_k(self, batch: Batch) -> tuple[TopKDistillation, torch.Tensor]:
        """The student's k most likely tokens at every reply position with the teacher's implicit
        reward of each, for the update's exact expectation; and that expectation [B, T-1] under
        the student as it is now, 0 off the reply."""
        cfg, k = self.cfg, self.params.top_k
        micro, temperature = cfg.train.micro_batch_size, cfg.rollout.temperature
        ids, own = gathered_logprobs(self.student, batch, k, micro, temperature)
        _, teacher = gathered_logprobs(self.models["teacher"], batch, ids, micro, temperature)
        rewards, reverse_kl = teacher, True
        if "teacher_ref" in self.models:
            _, ref = gathered_logprobs(self.models["teacher_ref"], batch, ids, micro, temperature)
            rewards, reverse_kl = teacher - ref, False
        term = TopKDistillation(ids, rewards, reverse_kl, self.params.coef)
        expected = expected_implicit_reward(own, rewards, reverse_kl)
        return term, expected * batch.loss_mask
