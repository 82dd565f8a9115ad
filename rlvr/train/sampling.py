"""A step's training groups from the rollout source: sampled ahead as rollout.max_staleness
allows, rounds of dynamic sampling until enough groups vary, infrastructure failures left out,
and each sample's greedy baseline where the estimator reads one."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rlvr.algos.filters import usable_samples, varied_groups
from rlvr.config import Config
from rlvr.train.faults import RewardErrors
from rlvr.train.profile import timed
from rlvr.types import Trajectory

TRAIN_STREAM = 0  # sampling seeds of training rollouts (eval samples on 1)


@dataclass
class Sampled:
    """One step's rollouts as `Trainer.learn` takes them."""

    trajectories: list[Trajectory]
    # greedy-baseline reward per sample, when the estimator reads one
    baselines: torch.Tensor | None
    metrics: dict[str, float]  # sampling metrics, logged with the step
    timings: dict[str, float]


class GroupSampler:
    """Draws each step's groups; `state` is the trainer's (its `step`, and the `cursor` into the
    task's training problems, which it advances)."""

    def __init__(self, cfg: Config, components, source, reward_errors: RewardErrors):
        self.cfg, self.components, self.source = cfg, components, source
        self.reward_errors = reward_errors

    def collect(
        self, state: dict, timings: dict[str, float]
    ) -> tuple[list[Trajectory], torch.Tensor | None, dict[str, float]]:
        """This step's groups (after any group filtering), each sample's greedy-baseline reward
        when the estimator needs one, and sampling metrics."""
        cfg, algo = self.cfg, self.cfg.algo
        wanted = cfg.rollout.batch_size // cfg.rollout.group_size
        kept: list[Trajectory] = []
        baselines: list[float] = []
        sampled = rounds = dropped = 0
        counts = {"sampling/infra_excluded": 0}
        for ahead in range(cfg.rollout.max_staleness + 1):  # this step's batch, then the next k
            self.source.submit(
                self.problems(state["cursor"] + ahead * wanted, wanted),
                cfg.rollout.group_size,
                (cfg.train.seed, TRAIN_STREAM, state["step"] + ahead),
            )
        while len(kept) < wanted * cfg.rollout.group_size and rounds <= algo.max_sampling_rounds:
            problems = self.problems(state["cursor"], wanted)
            state["cursor"] += wanted
            # round 0 keeps the plain (seed, stream, step) seed; extra rounds get their own
            seed = (cfg.train.seed, TRAIN_STREAM, state["step"]) + ((rounds,) if rounds else ())
            trajectories, greedy = self.collect_round(problems, seed, state["step"], timings)
            trajectories, greedy = self.exclude_infra_errors(trajectories, greedy, counts)
            sampled += len(problems)
            if not algo.dynamic_sampling:
                kept, baselines = trajectories, greedy or []
                break
            dropped += len(problems) - self.keep_varied(trajectories, greedy, kept, baselines)
            rounds += 1
        if not kept:  # nothing varied in any round: train on the last one (zero advantages)
            kept, baselines = trajectories, greedy or []
        kept, baselines = kept[: wanted * cfg.rollout.group_size], baselines[: len(kept)]
        metrics = {
            **counts,
            "sampling/prompts": sampled,
            "sampling/kept_groups": len(kept) // cfg.rollout.group_size,
            "sampling/dropped_groups": dropped,
        }
        needs_baseline = "baseline_rewards" in self.components.requires
        return kept, torch.tensor(baselines) if needs_baseline else None, metrics

    def keep_varied(
        self,
        trajectories: list[Trajectory],
        greedy: list[float] | None,
        kept: list[Trajectory],
        baselines: list[float],
    ) -> int:
        """Append the round's groups whose rewards vary to `kept` (ids renumbered to stay unique
        across rounds) and their baselines; the number of groups kept."""
        rewards = torch.tensor([t.reward for t in trajectories])
        keep = varied_groups(rewards, torch.tensor([t.group_id for t in trajectories]))
        kept_ids = sorted({t.group_id for t, k in zip(trajectories, keep.tolist()) if k})
        offset = max((t.group_id for t in kept), default=-1) + 1
        renumber = {g: offset + i for i, g in enumerate(kept_ids)}
        for t, b, k in zip(trajectories, greedy or [0.0] * len(trajectories), keep.tolist()):
            if k:
                t.group_id = renumber[t.group_id]
                kept.append(t)
                baselines.append(b)
        return len(kept_ids)

    def problems(self, cursor: int, count: int) -> list:
        return [self.components.task.train_problem(cursor + i) for i in range(count)]

    def exclude_infra_errors(
        self, trajectories: list[Trajectory], greedy: list[float] | None, counts: dict
    ) -> tuple[list[Trajectory], list[float] | None]:
        """Drop samples whose reward failed for infrastructure reasons (and groups left too small)."""
        keep = usable_samples(
            torch.tensor([t.status == "infra_error" for t in trajectories]),
            torch.tensor([t.group_id for t in trajectories]),
            self.components.min_group_size,
        ).tolist()
        counts["sampling/infra_excluded"] += keep.count(False)
        kept = [t for t, k in zip(trajectories, keep) if k]
        return kept, None if greedy is None else [b for b, k in zip(greedy, keep) if k]

    def collect_round(
        self, problems, seed, step: int, timings: dict[str, float]
    ) -> tuple[list[Trajectory], list[float] | None]:
        source = self.source
        trajectories = source.collect(problems, self.cfg.rollout.group_size, seed)
        self.reward_errors.record(step + 1, trajectories)
        for name, seconds in source.timings.items():
            timings[f"time/{name}"] = timings.get(f"time/{name}", 0.0) + seconds
        timings.update({f"rollout/{name}": value for name, value in source.stats.items()})
        if "baseline_rewards" not in self.components.requires:
            return trajectories, None
        with timed(timings, "time/baseline_rollout"):
            greedy = replace(source.evaluator.params, temperature=0.0)
            per_prompt = [t.reward for t in source.evaluator.collect(problems, 1, seed, greedy)]
        return trajectories, [per_prompt[t.group_id] for t in trajectories]
