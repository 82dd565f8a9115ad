"""The in-process backend (the default): this process samples with its own engine and steps
the policy with its own optimizer."""

from __future__ import annotations

from transformers import PreTrainedModel

from rlvr.config import Config
from rlvr.rollout.engine import Engine
from rlvr.rollout.runner import EpisodeRunner
from rlvr.rollout.weight_noise import WeightNoise
from rlvr.train.checkpoint import Restored
from rlvr.train.update import (
    UpdateInputs,
    UpdateResult,
    make_optimizer,
    make_scheduler,
    policy_update,
    scale_lr,
)
from rlvr.types import Trajectory


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


class LocalUpdate:
    """The update group of one process: its optimizer and scheduler step the policy itself."""

    def __init__(self, cfg: Config, model: PreTrainedModel) -> None:
        self.cfg = cfg
        self.optimizer = make_optimizer(cfg, model)
        self.scheduler = make_scheduler(cfg, self.optimizer)

    def load(self, model, restored: Restored | None) -> None:
        """Take a resumed run's optimizer and scheduler state (None: a fresh start)."""
        if restored is not None:
            self.optimizer.load_state_dict(restored.optimizer)
            self.scheduler.load_state_dict(restored.scheduler)

    def update(self, model, data: UpdateInputs, loss_fn, kl_fn, generator) -> UpdateResult:
        return policy_update(
            model, self.optimizer, self.scheduler, data, self.cfg, loss_fn, kl_fn, generator
        )

    def scale_lr(self, factor: float) -> None:
        scale_lr(self.optimizer, self.scheduler, factor)

    def describe(self) -> list[str]:
        return []

    def close(self) -> None:
        return None
