"""From a step's packed batch to the update's inputs: the no-grad logprob passes, the token
rewards (a method's, the KL penalty where it is folded in), the advantages (with a method's
offsets, broadcast to side rows, weighted by truncated IS) and the critic's targets."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algos.advantages import AdvInputs, RunningMean, broadcast_from_last
from rlvr.algos.correction import mismatch_metrics, truncated_is_weights
from rlvr.algos.kl import AdaptiveKLCoef
from rlvr.config import Config
from rlvr.models.logprobs import autocast
from rlvr.rollout.tree import segment_tensors
from rlvr.train.batching import with_side_rows
from rlvr.train.critic import Critic
from rlvr.train.hooks import Methods, Step
from rlvr.train.profile import timed
from rlvr.train.reference import ReferencePolicy
from rlvr.train.update import UpdateInputs, batch_logprobs
from rlvr.types import Batch, Trajectory


def reward_components(
    trajectories: list[Trajectory], weights: dict[str, float]
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Each trajectory's own value of every task.rewards component [B, K] (as its reward logged
    it) and their weights [K]; (None, None) for a reward that is not a combination."""
    if not weights:
        return None, None
    values = [[t.info.get("components", {}).get(n, 0.0) for n in weights] for t in trajectories]
    return torch.tensor(values), torch.tensor(list(weights.values()))


@dataclass
class Passes:
    """What the no-grad passes over the rows computed, each [R, T-1] (None where nothing reads
    it): the old policy's logprobs, the reference's, sum_v pi_v^2 under the old policy, and
    each position's logsumexp under the old policy and the reference."""

    old: torch.Tensor | None = None
    ref: torch.Tensor | None = None
    squares: torch.Tensor | None = None
    old_lse: torch.Tensor | None = None
    ref_lse: torch.Tensor | None = None


class UpdatePreparer:
    """Turns a step's packed batch into UpdateInputs; holds what that reads across steps (the
    reference, the critic, the KL coefficient, the running reward baseline)."""

    def __init__(
        self, cfg: Config, model, pad_id: int, components, reference, critic,
        kl_coef: AdaptiveKLCoef, reward_baseline: RunningMean,
    ):  # fmt: skip
        self.cfg, self.model, self.pad_id, self.components = cfg, model, pad_id, components
        self.reference, self.critic = reference, critic
        self.kl_coef, self.reward_baseline = kl_coef, reward_baseline

    @classmethod
    def for_run(cls, cfg: Config, model, pad_id: int, components) -> UpdatePreparer:
        """With a frozen reference where a KL term or the estimator reads one (soft Q-learning
        reads Q and V off the logits relative to the reference's) and a critic where the
        estimator reads values."""
        requires, a = components.requires, cfg.algo
        wants_reference = components.kl is not None or {"ref_logprobs", "ref_normaliser"} & requires
        return cls(
            cfg, model, pad_id, components,
            ReferencePolicy(model) if wants_reference else None,
            Critic(model, cfg) if "values" in requires else None,
            AdaptiveKLCoef(a.kl_coef, a.kl_target, a.kl_horizon),
            RunningMean(a.baseline_decay),  # for estimators needing reward_mean
        )  # fmt: skip

    @property
    def methods(self) -> Methods:
        return self.components.methods

    def prepare(self, step: Step, baselines: torch.Tensor | None) -> tuple[UpdateInputs, dict]:
        """The update's inputs for `step.batch`, and the metrics the passes logged. Logprobs
        cover the episodes' side rows too; advantages are the episodes', broadcast to them."""
        cfg, batch, extra = self.cfg, step.batch, {}
        offsets = self.methods.advantage_offsets(step)
        side = with_side_rows(step.trajectories, batch, self.pad_id)
        rows, episodes = side if side is not None else (batch, None)
        passes = self.passes(rows, step, extra)

        def episode_part(x: torch.Tensor | None) -> torch.Tensor | None:  # [len(rows), ...]
            return x if x is None else x[: len(batch), : batch.loss_mask.shape[1]]

        values = step.values
        if self.critic is not None and values is None:
            with timed(step.timings, "time/values"):
                values = self.critic.values(batch)
        student = episode_part(passes.old)
        student = batch.behaviour_logprobs if student is None else student
        token_rewards, kl_coef = self.token_rewards(step, student, episode_part(passes.ref), extra)
        inputs = self.advantage_inputs(step, token_rewards, values, baselines)
        inputs.old_logprobs = episode_part(passes.old)
        inputs.sum_pi_squared = episode_part(passes.squares)
        # what an estimator reads the logits off (soft Q-learning's Q and V, with its own beta)
        inputs.old_normaliser = episode_part(passes.old_lse)
        inputs.ref_normaliser = episode_part(passes.ref_lse)
        inputs.ref_logprobs = episode_part(passes.ref)
        advantages, returns = self.advantages(step, inputs, values, offsets)
        if episodes is not None:
            width = rows.loss_mask.shape[1]
            advantages = torch.cat([
                torch.nn.functional.pad(advantages, (0, width - advantages.shape[1])),
                broadcast_from_last(
                    advantages, batch.loss_mask, episodes, rows.loss_mask[len(batch) :]
                ),
            ])  # fmt: skip
        if cfg.algo.tis != "off":
            # Scaling the advantage by a non-negative, stop-gradient weight scales every
            # registered loss's per-token term by it, so the correction needs no loss changes.
            weights, tis_metrics = truncated_is_weights(
                passes.old, rows.behaviour_logprobs, rows.loss_mask, cfg.algo.tis, cfg.algo.tis_cap
            )
            advantages = advantages * weights
            extra.update(tis_metrics)
        data = UpdateInputs(
            rows, advantages, passes.old, passes.ref, kl_coef, values, returns,
            ref_normaliser=passes.ref_lse,
        )  # fmt: skip
        return data, extra

    def passes(self, rows: Batch, step: Step, extra: dict[str, float]) -> Passes:
        """The old policy's pass, when the update or an estimator or method needs its logprobs
        apart from the update's own (or what it reads off them), and the reference's."""
        cfg, timings, requires = self.cfg, step.timings, self.components.requires
        micro, temperature = cfg.train.micro_batch_size, cfg.rollout.temperature
        share = cfg.train.share_prompt
        timings["time/old_logprobs"] = timings["time/ref_logprobs"] = 0.0
        on_policy = cfg.algo.ppo_epochs == 1 and cfg.algo.minibatches == 1  # then old == current
        zeros = lambda field: torch.zeros_like(rows.loss_mask) if field in requires else None  # noqa: E731
        out = Passes(
            squares=zeros("sum_pi_squared"),
            old_lse=zeros("old_normaliser"),
            ref_lse=zeros("ref_normaliser"),
        )
        observers = self.methods.old_pass(step)  # a method may read that pass too
        # in the precision the update computes the new logprobs in
        precision = autocast(cfg.train.autocast, self.model.device)
        reads_old = out.squares is not None or bool(observers) or out.old_lse is not None
        if not on_policy or cfg.algo.tis != "off" or reads_old:
            with timed(timings, "time/old_logprobs"), precision:
                out.old = batch_logprobs(
                    self.model, rows, micro, temperature, share, out.squares, observers,
                    out.old_lse,
                )  # fmt: skip
            extra.update(mismatch_metrics(out.old, rows.behaviour_logprobs, rows.loss_mask))
        if self.reference is not None:
            with timed(timings, "time/ref_logprobs"), precision:
                out.ref = self.reference.logprobs(rows, micro, temperature, share, out.ref_lse)
        return out

    def token_rewards(
        self, step: Step, student: torch.Tensor, ref: torch.Tensor | None, extra: dict
    ) -> tuple[torch.Tensor, float]:
        """Each token's reward [B, T-1]: its turn's, a method's, less the KL penalty where it
        is folded into rewards; and the step's KL coefficient."""
        cfg, batch = self.cfg, step.batch
        token_rewards = batch.token_rewards
        method_rewards = self.methods.token_rewards(step, student)
        if method_rewards is not None:
            token_rewards = token_rewards + method_rewards
        kl_coef = self.methods.kl_coef(step, self.kl_coef.value)
        if ref is not None and self.components.kl is not None and cfg.algo.kl_in_reward:
            kl = self.components.kl(student, ref, cfg.algo) * batch.loss_mask
            token_rewards = token_rewards - kl_coef * kl
            extra["kl"] = float(kl.sum() / batch.loss_mask.sum().clamp(min=1))
        return token_rewards, kl_coef

    def advantage_inputs(
        self, step: Step, token_rewards: torch.Tensor, values, baselines
    ) -> AdvInputs:
        """What the estimator reads that the batch and the rewards give."""
        batch, requires = step.batch, self.components.requires
        segments = (
            segment_tensors(step.trajectories, batch.loss_mask.shape[1])
            if "segment_advantages" in requires
            else (None, None)
        )
        components = reward_components(step.trajectories, self.cfg.task.rewards)
        inputs = AdvInputs(
            token_rewards.sum(-1), batch.group_ids, batch.loss_mask, token_rewards=token_rewards,
            values=values, baseline_rewards=baselines, turn_rewards=batch.turn_rewards,
            turn_ids=batch.turn_ids, segment_advantages=segments[0], segment_weights=segments[1],
            reward_components=components[0], reward_weights=components[1],
        )  # fmt: skip
        if "target_ids" in requires:  # -1 past a row's end: no token matches it
            ended = batch.attention_mask[:, 1:] == 0
            inputs.target_ids = batch.input_ids[:, 1:].masked_fill(ended, -1)
        if "reward_mean" in requires:
            inputs.reward_mean = torch.tensor(self.reward_baseline.value)
        return inputs

    def advantages(
        self, step: Step, inputs: AdvInputs, values: torch.Tensor | None, offsets
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The estimator's advantages [B, T-1] (or a method's own) plus a method's `offsets`, and
        the critic's targets (before the offsets: shaping is no return)."""
        cfg, mask = self.cfg, step.batch.loss_mask
        self.methods.advantage_inputs(step, inputs)
        advantages = self.methods.advantages(step, inputs)
        if advantages is None:
            advantages = self.components.advantage(inputs, cfg.algo)
        self.reward_baseline.update(inputs.rewards)  # after: a baseline never sees its own batch
        self.methods.after_advantages(step, inputs)  # likewise what a method fits on the batch
        returns = None
        if values is not None:
            targets = getattr(self.components.advantage, "critic_targets", None)  # gae's lam=1
            returns = targets(inputs, cfg.algo) if targets else (advantages + values) * mask
        if offsets is not None:
            advantages = advantages + offsets
        return advantages, returns
