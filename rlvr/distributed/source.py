"""Where the trainer gets its samples: a rollout source returns finished, version-stamped
trajectories and takes the policy's weights after each update. In-process here; Ray workers in
ray_rollout.py. The trainer sees only this interface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from transformers import PreTrainedModel

from rlvr.rollout.engine import Engine, SamplingParams
from rlvr.rollout.runner import EpisodeRunner
from rlvr.rollout.weight_noise import WeightNoise
from rlvr.types import Problem, Trajectory


class Runner(Protocol):
    """What evaluation and greedy baselines call: EpisodeRunner.collect's signature."""

    params: SamplingParams

    def collect(
        self,
        problems: Sequence[Problem],
        group_size: int,
        seed: Sequence[int],
        params: SamplingParams | None = None,
    ) -> list[Trajectory]: ...


class RolloutSource(Protocol):
    params: SamplingParams
    timings: dict[str, float]  # seconds per phase of the last collect
    stats: dict[str, float]  # sampling costs of the last collect (tree rollouts)
    evaluator: Runner  # independent samples (never trees) from the newest weights

    def submit(self, problems: Sequence[Problem], group_size: int, seed: Sequence[int]) -> None:
        """Start sampling a batch now, with the weights synced last (a no-op where sampling only
        happens inside collect)."""
        ...

    def collect(
        self, problems: Sequence[Problem], group_size: int, seed: Sequence[int]
    ) -> list[Trajectory]:
        """The batch's trajectories (submitted earlier or now), each stamped with its version."""
        ...

    def sync(self, model: PreTrainedModel, version: int) -> None:
        """Take the policy's weights after `version` updates; raises rather than hang."""
        ...

    def release_memory(self) -> None: ...

    def metrics(self) -> dict[str, float]:
        """Utilisation since the last call (idle ratios, weight-load seconds)."""
        ...

    def describe(self) -> list[str]:
        """Where sampling runs, one line per place, for the run's log."""
        ...

    def in_flight(self) -> dict:
        """Batches submitted but not collected, finished, for a checkpoint to hold."""
        ...

    def restore(self, in_flight: dict) -> None:
        """Put back what in_flight() returned, so a resumed run trains on the same samples."""
        ...

    def close(self) -> None: ...


class InProcessRollout:
    """Samples inside collect, with the engine of this process (the default backend)."""

    def __init__(self, engine: Engine, runner: EpisodeRunner, evaluator: EpisodeRunner):
        self.engine, self.runner, self.evaluator = engine, runner, evaluator
        self.params = runner.params
        self.noise: WeightNoise | None = None  # 3PO's posterior over the weights, when set
        self.timings: dict[str, float] = {}
        self.stats: dict[str, float] = {}
        self.version = 0

    def submit(self, problems, group_size, seed) -> None:
        return None

    def collect(self, problems, group_size, seed) -> list[Trajectory]:
        if self.noise is None:
            trajectories = self.runner.collect(problems, group_size, seed)
        else:  # 3PO: an EpisodeRunner's replies, over weight draws (a tree's are refused)
            trajectories = self.runner.collect(problems, group_size, seed, noise=self.noise)
        self.timings, self.stats = dict(self.runner.timings), dict(self.runner.stats)
        if self.noise is not None:
            self.stats.update(self.noise.metrics())
        for trajectory in trajectories:
            trajectory.stamp(self.version)
        return trajectories

    def sync(self, model: PreTrainedModel, version: int) -> None:
        self.engine.load_weights(model)
        self.version = version

    def release_memory(self) -> None:
        self.engine.release_memory()

    def metrics(self) -> dict[str, float]:
        return {}

    def describe(self) -> list[str]:
        return []

    def in_flight(self) -> dict:
        return {}

    def restore(self, in_flight: dict) -> None:
        if in_flight:
            raise ValueError("an in-process rollout samples nothing ahead; nothing to restore")

    def close(self) -> None:
        return None
