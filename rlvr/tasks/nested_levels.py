"""Nested levels: find a hidden bit string level by level, where a level's reward shows only once
every level before it is solved (hierarchical rewards, Nishikawa & Suzuki), scored with a gate."""

from __future__ import annotations

import random
from functools import partial

from pydantic import BaseModel, ConfigDict, Field

from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.rewards import gated, score_safely
from rlvr.rewards.base import RewardFn
from rlvr.tasks.base import seeded_rng
from rlvr.types import Problem, Score


class NestedLevelsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    levels: int = Field(4, ge=1, le=8, description="Levels of the hidden string.")
    bits_per_level: int = Field(2, ge=1, le=8, description="Bits a level adds to the string.")
    weight_exponent: float = Field(
        1.0,
        ge=0,
        description="Level i's reward weight c_i is proportional to i ** -weight_exponent "
        "(the paper's gamma); the weights sum to 1.",
    )
    keys: int = Field(
        4, ge=1, le=1000, description="Distinct hidden strings; a prompt names its key."
    )


def level_weights(levels: int, exponent: float) -> list[float]:
    """c_i = i^-exponent / sum_j j^-exponent for i = 1..levels."""
    raw = [i**-exponent for i in range(1, levels + 1)]
    return [c / sum(raw) for c in raw]


def random_blocks(rng: random.Random, levels: int, bits: int) -> str:
    """`levels` blocks of `bits` uniformly random bits, space-separated (the reply's format)."""
    return " ".join("".join(str(rng.randrange(2)) for _ in range(bits)) for _ in range(levels))


def level_check(level: int) -> RewardFn:
    """Reward 1 when block `level` (0-based) of the reply equals that of `problem.answer`."""

    def check(problem: Problem, response: str) -> Score:
        blocks, target = response.split(), problem.answer.split()
        solved = len(blocks) > level and blocks[level] == target[level]
        return Score(float(solved), "ok" if solved else "wrong")

    check.__doc__ = f"Level {level + 1}: block {level + 1} of the reply matches the hidden bits."
    return check


def all_levels(problem: Problem, response: str) -> Score:
    """Every level solved: the reply's blocks are exactly the hidden ones."""
    solved = response.split() == problem.answer.split()
    return Score(float(solved), "ok" if solved else "wrong")


class NestedLevelsTask:
    """Find a key's hidden bit string, one block per level, each scored once those before it are.

    Level i's reward c_i counts only inside the cell where levels < i are solved (single-turn)."""

    name = "nested_levels"
    verifier = None  # the task's own gated reward scores the reply
    Params = NestedLevelsParams
    # examples/nested_levels.toml (benchmarks/methods/hierarchical.py).
    recommended_tiny = {"rollout.batch_size": 64, "rollout.max_new_tokens": 16, "train.lr": 3e-4}

    def __init__(self, params: NestedLevelsParams, seed: int, eval_size: int):
        self.params, self.seed, self.eval_size = params, seed, eval_size
        p = params
        names = [f"level{i}" for i in range(1, p.levels + 1)]
        self.weights = dict(zip(names, level_weights(p.levels, p.weight_exponent)))
        checks = {name: level_check(i) for i, name in enumerate(self.weights)}
        # f(y) = sum_i c_i h_i(y) * prod_{j<i} h_j(y): the gate opens level i inside level i-1's cell
        self.reward = partial(score_safely, gated(self.weights, checks))
        self.targets = [
            random_blocks(seeded_rng(seed, "target", key), p.levels, p.bits_per_level)
            for key in range(p.keys)
        ]

    def _problem(self, id: str, key: int) -> Problem:
        p = self.params
        prompt = f"Key {key}: {p.levels} blocks of {p.bits_per_level} bits."
        return Problem(id=id, prompt=prompt, answer=self.targets[key], domain="nested_levels")

    def train_problem(self, index: int) -> Problem:
        key = seeded_rng(self.seed, "train", index).randrange(self.params.keys)
        return self._problem(f"nested-train-{index}", key)

    def eval_problems(self) -> list[Problem]:
        """Every key in turn: the strings are what the policy has to find, so eval asks for the
        same ones training rewards (as guess_number's eval covers every secret)."""
        keys = self.params.keys
        return [self._problem(f"nested-eval-{i}", i % keys) for i in range(self.eval_size)]

    def make_env(self, reward=None, verifier=None) -> SingleTurnEnv:
        return SingleTurnEnv(self.reward, partial(score_safely, all_levels))

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        """Uniformly random blocks in the reply's format: the warm start learns the format and
        spreads its mass over every string (a reference that knows no level), so the levels are
        RL's to find; `flawed` changes nothing."""
        p = self.params
        return random_blocks(seeded_rng("demo", problem.id), p.levels, p.bits_per_level)
