"""The two seams of a backend, all the trainer sees of it: a rollout source returns finished,
version-stamped trajectories and takes the policy's weights after each update; an update group
runs the update and holds the optimizer. distributed/local.py and ray_*.py implement them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from torch.optim.lr_scheduler import LRScheduler
from transformers import PreTrainedModel

from rlvr.rollout.engine import SamplingParams
from rlvr.train.checkpoint import Restored
from rlvr.train.update import UpdateInputs, UpdateResult
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
    """Where the trainer gets its samples: this process's engine, or rollout workers elsewhere."""

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


class UpdateGroup(Protocol):
    """Who runs the policy update: this process alone, or it and trainer ranks elsewhere."""

    optimizer: Any  # what a checkpoint saves (its state_dict): a sharded group's is gathered
    scheduler: LRScheduler

    def load(self, model: PreTrainedModel, restored: Restored | None) -> None:
        """Take a resumed run's optimizer and scheduler state (None: a fresh start)."""
        ...

    def update(
        self, model: PreTrainedModel, data: UpdateInputs, loss_fn, kl_fn, generator
    ) -> UpdateResult:
        """One policy update of `model` on `data` (epochs x minibatches of optimizer steps)."""
        ...

    def scale_lr(self, factor: float) -> None: ...

    def describe(self) -> list[str]:
        """Where the update runs, one line per place, for the run's log."""
        ...

    def close(self) -> None: ...
