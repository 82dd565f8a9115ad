"""Parason (PA-GRPO): pay correct replies whose thread tree shortens their critical path, and
sample with every parallel region dispatched as blind sibling threads, each trained on its own
context; the trace grammar and the dispatching engine live in rlvr/rollout/parallel.py."""

from __future__ import annotations

import torch
from pydantic import Field

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.shaping import parallel_bonus
from rlvr.config import ConfigError
from rlvr.registry import lookup
from rlvr.rollout.parallel import DispatchingEngine, counter_for, trace_stats
from rlvr.train.hooks import Method, MethodParams, Step
from rlvr.train.update import UpdateInputs
from rlvr.types import Trajectory

KEY = "methods.parason"


class Params(MethodParams):
    dispatch: bool = Field(
        False,
        description="Sample every reply with its parallel regions dispatched, one thread per "
        "outline, each blind to its siblings (as in deployment). Each thread after a region's "
        "first trains as its own sequence on the context it was sampled from, with its "
        "episode's advantage (broadcast_from_last); eval dispatches too.",
    )
    accel_weight: float = Field(
        0.0,
        ge=0,
        description="A correct rollout whose reply parses as a parallel-thread trace gains "
        "weight * min(acceleration - 1, accel_cap), acceleration = its tokens / its "
        "critical-path tokens; 0 disables (the paper: 0.5).",
    )
    accel_cap: float = Field(0.2, gt=0, description="The most acceleration - 1 that earns a bonus.")
    subtask_beta: float = Field(
        0.0, ge=0, description="Weight of the group z-score of the share of tokens in <Subtask> "
        "threads, paid to correct rollouts (the paper sweeps 0.025-0.1).",
    )  # fmt: skip
    trial_beta: float = Field(
        0.0, ge=0, description="Weight of the group z-score of the share of tokens in <Trial> "
        "threads, paid to correct rollouts.",
    )  # fmt: skip
    ratio_beta: float = Field(
        0.0, ge=0, description="Weight of the group z-score of the share of tokens in any "
        "thread, paid to correct rollouts.",
    )  # fmt: skip
    latency_alpha: float = Field(
        0.0, ge=0, description="Weight of the group z-score of the acceleration, paid to "
        "correct rollouts (the paper: 0 or 0.1).",
    )  # fmt: skip

    @property
    def shapes(self) -> bool:
        weights = (self.accel_weight, self.subtask_beta, self.trial_beta, self.ratio_beta,
                   self.latency_alpha)  # fmt: skip
        return any(weights)


def parallel_shaping(
    trajectories: list[Trajectory], group_ids: torch.Tensor, tokenizer, p: Params
) -> tuple[torch.Tensor, dict[str, float]]:
    """The bonus [B] of each trajectory, and the batch's mean trace measurements."""
    stats = [
        trace_stats(t.response_text, counter_for(tokenizer, t.response_text)) for t in trajectories
    ]
    acceleration = torch.tensor([s.acceleration for s in stats])
    structure = torch.tensor([[s.subtask_ratio, s.trial_ratio, s.parallel_ratio] for s in stats])
    correct = torch.tensor([t.correct for t in trajectories])
    bonus = parallel_bonus(
        acceleration, structure, correct, group_ids, p.accel_weight, p.accel_cap,
        (p.subtask_beta, p.trial_beta, p.ratio_beta), p.latency_alpha,
    )  # fmt: skip
    mean = lambda values: float(sum(values) / len(values))  # noqa: E731
    return bonus, {
        "parallel/bonus": float(bonus.mean()),
        "parallel/acceleration": float(acceleration.mean()),
        "parallel/critical_path_tokens": mean([s.critical_path_tokens for s in stats]),
        "parallel/subtask_ratio": float(structure[:, 0].mean()),
        "parallel/trial_ratio": float(structure[:, 1].mean()),
        "parallel/parallel_ratio": float(structure[:, 2].mean()),
        "parallel/well_formed": mean([s.well_formed for s in stats]),
        "parallel/regions": mean([s.regions for s in stats]),
    }


class Parason(Method):
    """Parason (arXiv 2608.24658): a bonus for correct replies whose threads shorten the
    critical path, and parallel regions dispatched as blind sibling threads."""

    Params = Params

    @classmethod
    def check(cls, params: Params, cfg, task) -> None:
        if not (params.dispatch or params.shapes):
            raise ConfigError(
                f"{KEY} is on but does nothing; fix: {KEY}.dispatch=true and/or a shaping "
                f"weight (e.g. {KEY}.accel_weight=0.5)"
            )
        if not params.dispatch:
            return
        clashes = {
            "distributed.backend=ray": cfg.distributed.backend == "ray",
            "rollout.tree_width": bool(cfg.rollout.tree_width),
            "rollout.replay": bool(cfg.rollout.replay),
            "debate.rounds": cfg.debate.rounds >= 2,
            **{f"methods.{name}": name in cfg.methods for name in ("w2spo", "direct_opd", "c3po")},
        }
        if on := [name for name, clash in clashes.items() if clash]:
            raise ConfigError(
                f"{KEY}.dispatch runs Parason's threads in the in-process rollout, as single "
                f"replies each scored whole; it does not combine with {', '.join(on)}. Fix: drop "
                f"those, or {KEY}.dispatch=false"
            )
        estimator = lookup(ADVANTAGES, cfg.algo.advantage, "algo.advantage", "rlvr.advantages")
        per_row = set(getattr(estimator, "requires", ())) & {"values", "probe_predictions"}
        if hasattr(task, "make_env") or per_row:
            raise ConfigError(
                f"{KEY}.dispatch trains Parason's threads as extra rows of single-turn replies, "
                "which take their episode's advantage: it does not combine with a multi-turn "
                f"task ('{cfg.task.name}' has its own env) or with an estimator that reads "
                f"per-row values or probes ('{cfg.algo.advantage}'). Fix: a single-turn task "
                f"and a critic-free estimator (rlvr list advantages), or {KEY}.dispatch=false"
            )

    def engine(self, engine, model, tokenizer, training: bool):
        return DispatchingEngine(engine, tokenizer) if self.params.dispatch else engine

    def setup(self, run) -> None:
        self.tokenizer = run.tokenizer

    def reward_bonus(self, step: Step) -> torch.Tensor | None:
        if not self.params.shapes:
            return None
        trajectories, groups = step.trajectories, step.batch.group_ids
        bonus, measured = parallel_shaping(trajectories, groups, self.tokenizer, self.params)
        step.metrics.update(measured)
        return bonus

    def update_inputs(self, step: Step, data: UpdateInputs) -> None:
        if self.params.dispatch:
            step.metrics["parallel/thread_rows"] = len(data.batch) / len(step.batch) - 1
