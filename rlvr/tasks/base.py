"""The Task protocol, and the seeded train/eval split shared by the generated (synthetic) tasks."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import ClassVar, Protocol

from pydantic import BaseModel

from rlvr.types import Message, Problem


class Task(Protocol):
    name: ClassVar[str]  # registry name
    verifier: str  # name in REWARDS that decides correctness (accuracy)
    Params: ClassVar[type[BaseModel]]  # the task's own settings

    def __init__(self, params: BaseModel, seed: int, eval_size: int): ...

    def train_problem(self, index: int) -> Problem:
        """Deterministic in (seed, index); never one of the eval problems."""
        ...

    def eval_problems(self) -> list[Problem]:
        """A fixed list of eval_size problems, disjoint from train."""
        ...

    def demonstration(self, problem: Problem, flawed: bool = False) -> str | list[Message]:
        """A worked solution (the assistant's reply), or for a multi-turn task the messages of a
        whole episode after the prompt; `flawed` makes the task's systematic mistake."""
        ...

    # Optional: `make_env(reward, verifier) -> Env` for tasks played as their own environment
    # (multi-turn games, tool use); without it the task runs as a SingleTurnEnv.
    #
    # Optional, for tasks that read data (files): `fit_prompts(fit)` passes every train and eval
    # problem through `fit(problem, where) -> Problem | None`, `where` naming its source (file and
    # line); `fit` returns the problem, a truncated copy, or None to drop it, or raises a
    # ValueError naming the fix (it checks prompts against the model's context before any work).
    # And `fingerprint() -> str`: a hash of that data, so a warm start is cached on what it read.
    #
    # Optional: `recommended_tiny: dict[str, Any]`, dotted config keys -> values that suit the
    # embedded tiny model on this task (preset, warm start, lengths, lr); `rlvr train` uses each
    # one the user left unset and says so (rlvr/train/recommend.py).


def seeded_rng(*parts: object) -> random.Random:
    """A Random seeded from the parts as a string: stable across runs, unlike hash()."""
    return random.Random(":".join(map(str, parts)))


class EpochOrder:
    """Index -> item of a fixed pool, in a fresh seeded order each epoch, so the index alone
    decides the item (a resumed run draws the same problems)."""

    def __init__(self, items: list, seed: int):
        self.items, self.seed = items, seed
        self._epoch, self._order = -1, []

    def __getitem__(self, index: int):
        epoch, position = divmod(index, len(self.items))
        if epoch != self._epoch:
            order = list(range(len(self.items)))
            seeded_rng(self.seed, "epoch", epoch).shuffle(order)
            self._epoch, self._order = epoch, order
        return self.items[self._order[position]]


class GeneratedTask(ABC):
    """Base for tasks that draw problems at random: a unique eval set, and train draws that avoid it."""

    name: ClassVar[str]
    # Bounds the redraws when the settings allow few distinct problems.
    max_attempts = 10_000

    def __init__(self, seed: int, eval_size: int):
        self.seed = seed
        self._eval: dict[str, Problem] = {}
        for i in range(eval_size * 10 + self.max_attempts):
            if len(self._eval) == eval_size:
                break
            problem = self.draw(seeded_rng(seed, "eval", i))
            self._eval.setdefault(problem.id, problem)
        if len(self._eval) < eval_size:
            raise ValueError(
                f"{self.name}: found only {len(self._eval)} distinct problems for "
                f"eval_size={eval_size}; lower task.eval_size or widen the task's settings"
            )

    @abstractmethod
    def draw(self, rng: random.Random) -> Problem:
        """One random problem; its id must identify it (eval disjointness compares ids)."""

    def train_problem(self, index: int) -> Problem:
        for attempt in range(self.max_attempts):
            # The attempt counter re-draws deterministically when a draw hits the eval set.
            problem = self.draw(seeded_rng(self.seed, "train", index, attempt))
            if problem.id not in self._eval:
                return problem
        raise ValueError(
            f"{self.name}: the eval set covers almost every problem these settings allow; "
            "lower task.eval_size or widen the task's settings"
        )

    def eval_problems(self) -> list[Problem]:
        return list(self._eval.values())
