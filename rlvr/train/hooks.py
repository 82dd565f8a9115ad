"""The fixed points where a research method acts on the loop. The trainer calls every chosen
method at each point, in config order, and names none of them (rlvr/methods/ holds them)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch
from pydantic import BaseModel, ConfigDict

from rlvr.types import Batch, Trajectory

if TYPE_CHECKING:
    from rlvr.algos.advantages import AdvInputs
    from rlvr.config import Config
    from rlvr.train.update import UpdateInputs


class MethodParams(BaseModel):
    """A method's own settings, its table under `methods.<name>`: a mistyped key is an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class Run:
    """What a method may read, and replace, once the policy is loaded and sampling is wired."""

    cfg: Config
    model: Any
    tokenizer: Any
    components: Any  # train.components.Components: a method may swap its task (River's screen)
    source: Any  # the RolloutSource; its `evaluator` samples the policy alone
    updater: Any  # the UpdateGroup; its `optimizer` steps the policy
    critic: Any  # train.critic.Critic, or None without a critic
    say: Callable[[str], None]  # a line for the run's console


@dataclass
class Step:
    """One training step as the hooks see it: what they add to `metrics` and `timings` is logged
    with the step."""

    index: int  # updates done before this step
    trajectories: list[Trajectory]
    metrics: dict[str, float]
    timings: dict[str, float]
    batch: Batch | None = None  # the packed trajectories, once packed
    values: torch.Tensor | None = None  # [B, T-1] critic values a method judged the batch with


class PassObserver(Protocol):
    """Reads the old-logprob pass (no grad, each row whole), micro-batch by micro-batch."""

    def capture(self) -> AbstractContextManager:
        """Within: the model's forwards are watched (e.g. a hook on one layer)."""

    def add(self, rows, attention, loss_mask, entropy) -> None:
        """What the last forward, of exactly `rows`, showed: attention [R, W], and loss_mask and
        each position's entropy [R, W-1]."""


class Method:
    """A research method: its own typed `Params` (under `methods.<name>` in the config) and the
    hooks it overrides; every hook does nothing by default."""

    Params: ClassVar[type[BaseModel]] = MethodParams
    reads_labels: ClassVar[bool] = False  # reads the verifier's scores: a label-free run refuses
    provides: ClassVar[frozenset[str]] = frozenset()  # optional AdvInputs fields it fills

    def __init__(self, params: BaseModel, cfg: Config):
        self.params, self.cfg = params, cfg

    @classmethod
    def check(cls, params: BaseModel, cfg: Config, task) -> None:
        """Raise ConfigError, naming the fix, where this run cannot use the method: its clashes
        with other settings are declared here, by their owner, before any work."""

    def setup(self, run: Run) -> None:
        """Once, before the first step (and before a resumed run loads the method's state)."""

    def engine(self, engine: Any, model: Any, tokenizer: Any, training: bool) -> Any:
        """The engine this process samples with for training (`training`) or for eval and
        `rlvr eval`, wrapped by the method (Parason dispatches threads, W2SPO writes weak
        branches); built before `setup`. Ray's workers build their own engines: a method that
        wraps one refuses Ray in its `check`."""
        return engine

    def after_sample(self, step: Step) -> None:
        """The step's scored rollouts are in; nothing is packed yet."""

    def rescore(self, step: Step) -> None:
        """Replace rewards on `step.trajectories` before they are shaped and packed; a method
        that judges with the critic leaves its values in `step.values` (and the critic, a judge
        now, is not fitted on this step)."""

    def reward_bonus(self, step: Step) -> torch.Tensor | None:
        """[B] added to each trajectory's last turn reward, read off the packed `step.batch`."""
        return None

    def advantage_offsets(self, step: Step) -> torch.Tensor | None:
        """[B, T-1] added to the advantages after the critic's targets are taken (shaping that
        is no return)."""
        return None

    def uses_kl(self) -> bool:
        """The method sets a KL coefficient (`kl_coef`), so the KL estimator is built even at
        algo.kl_coef = 0."""
        return False

    def token_rewards(self, step: Step, student: torch.Tensor) -> torch.Tensor | None:
        """[B, T-1] added to each token's reward before the KL penalty and the advantages;
        `student` [B, T-1] holds the policy's logprobs of `step.batch` (the old pass's, else the
        sampler's)."""
        return None

    def kl_coef(self, step: Step, coef: float) -> float:
        """The KL coefficient of this step, given the run's (after `token_rewards`)."""
        return coef

    def old_pass(self, step: Step) -> PassObserver | None:
        """An observer of the old policy's logprob pass over `step.batch`, which then runs."""
        return None

    def advantage_inputs(self, step: Step, inputs: AdvInputs) -> None:
        """Fill the AdvInputs fields the method `provides`, before the estimator runs."""

    def advantages(self, step: Step, inputs: AdvInputs) -> torch.Tensor | None:
        """[B, T-1] advantages in place of algo.advantage's, for a method that is its own
        estimator (weights toward a target distribution it fits); None leaves the estimator's."""
        return None

    def after_advantages(self, step: Step, inputs: AdvInputs) -> None:
        """The advantages are taken: what depended on not having seen this batch may see it."""

    def update_inputs(self, step: Step, data: UpdateInputs) -> None:
        """Add what the method trains on beside the policy loss to the update's inputs: rows to
        imitate (`data.imitation`) or a term read off the update's own forward (`data.terms`)."""

    def state_dict(self) -> dict | None:
        """What a checkpoint keeps of the method (None: it keeps nothing)."""
        return None

    def load_state_dict(self, state: dict) -> None:
        """Take back what `state_dict` saved: a method that saves state must override both."""
        raise TypeError(
            f"{type(self).__name__}.state_dict saved state for the checkpoint, but the method has "
            "no load_state_dict to resume from it; fix: give it one"
        )


@dataclass
class Methods:
    """The chosen methods by name, called together at each hook point."""

    chosen: dict[str, Method] = field(default_factory=dict)

    def setup(self, run: Run) -> None:
        for method in self.chosen.values():
            method.setup(run)

    def engine(self, engine: Any, model: Any, tokenizer: Any, training: bool) -> Any:
        for method in self.chosen.values():
            engine = method.engine(engine, model, tokenizer, training)
        return engine

    def after_sample(self, step: Step) -> None:
        for method in self.chosen.values():
            method.after_sample(step)

    def rescore(self, step: Step) -> None:
        for method in self.chosen.values():
            method.rescore(step)

    def reward_bonus(self, step: Step) -> torch.Tensor | None:
        return _summed(method.reward_bonus(step) for method in self.chosen.values())

    def advantage_offsets(self, step: Step) -> torch.Tensor | None:
        return _summed(method.advantage_offsets(step) for method in self.chosen.values())

    def uses_kl(self) -> bool:
        return any(method.uses_kl() for method in self.chosen.values())

    def token_rewards(self, step: Step, student: torch.Tensor) -> torch.Tensor | None:
        return _summed(method.token_rewards(step, student) for method in self.chosen.values())

    def kl_coef(self, step: Step, coef: float) -> float:
        for method in self.chosen.values():
            coef = method.kl_coef(step, coef)
        return coef

    def provides(self) -> frozenset[str]:
        """The AdvInputs fields the chosen methods fill."""
        return frozenset().union(*(method.provides for method in self.chosen.values()))

    def old_pass(self, step: Step) -> list[PassObserver]:
        observers = (method.old_pass(step) for method in self.chosen.values())
        return [observer for observer in observers if observer is not None]

    def advantage_inputs(self, step: Step, inputs: AdvInputs) -> None:
        for method in self.chosen.values():
            method.advantage_inputs(step, inputs)

    def advantages(self, step: Step, inputs: AdvInputs) -> torch.Tensor | None:
        """The advantages of the one chosen method that estimates them, or None."""
        given = {name: method.advantages(step, inputs) for name, method in self.chosen.items()}
        given = {name: advantages for name, advantages in given.items() if advantages is not None}
        if len(given) > 1:
            raise ValueError(
                f"methods {', '.join(given)} each estimate the advantages, and a step has one "
                "set; fix: keep one of them"
            )
        return next(iter(given.values()), None)

    def after_advantages(self, step: Step, inputs: AdvInputs) -> None:
        for method in self.chosen.values():
            method.after_advantages(step, inputs)

    def update_inputs(self, step: Step, data: UpdateInputs) -> None:
        for method in self.chosen.values():
            method.update_inputs(step, data)

    def state_dict(self) -> dict[str, dict]:
        states = {name: method.state_dict() for name, method in self.chosen.items()}
        return {name: state for name, state in states.items() if state is not None}

    def load_state_dict(self, states: dict[str, dict]) -> None:
        for name, state in states.items():
            self.chosen[name].load_state_dict(state)


def _summed(terms) -> torch.Tensor | None:
    present = [t for t in terms if t is not None]
    return sum(present[1:], present[0]) if present else None
