"""Nim as a task: starting piles to win from, and demonstrations of the winning strategy."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rlvr.envs.nim import MAX_TAKE, NimEnv, winning_take
from rlvr.tasks.base import seeded_rng
from rlvr.types import Message, Problem


class NimParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_stones: int = Field(20, ge=5, le=200, description="Starting piles are 5..max_stones.")
    opponent_skill: float = Field(
        0.5, ge=0, le=1, description="Chance the scripted opponent plays its winning move."
    )
    good_move_reward: float = Field(
        0.1, ge=0, description="Per-turn reward for leaving the opponent a multiple of 4."
    )


class NimTask:
    """Win Nim (take 1-3, last stone wins) against a scripted opponent (multi-turn)."""

    name = "nim"
    verifier = None  # the env scores the episode
    Params = NimParams
    # examples/nim.toml: replies are short, and games cost several turns each.
    recommended_tiny = {"rollout.batch_size": 64, "rollout.max_new_tokens": 24}

    def __init__(self, params: NimParams, seed: int, eval_size: int):
        self.params, self.seed, self.eval_size = params, seed, eval_size

    def _problem(self, id: str, stones: int) -> Problem:
        prompt = f"Nim: {stones} stones. Take 1 to 3 in turn; taking the last one wins. You start."
        return Problem(id=id, prompt=prompt, domain="nim", metadata={"stones": stones})

    def _stones(self, *parts: object) -> int:
        # Piles that are not multiples of 4: the first player can always force a win.
        choices = [n for n in range(5, self.params.max_stones + 1) if n % (MAX_TAKE + 1)]
        return seeded_rng(self.seed, *parts).choice(choices)

    def train_problem(self, index: int) -> Problem:
        return self._problem(f"nim-train-{index}", self._stones("train", index))

    def eval_problems(self) -> list[Problem]:
        return [
            self._problem(f"nim-eval-{i}", self._stones("eval", i)) for i in range(self.eval_size)
        ]

    def make_env(self, reward=None, verifier=None) -> NimEnv:
        return NimEnv(self.params.opponent_skill, self.params.good_move_reward)

    def demonstration(self, problem: Problem, flawed: bool = False) -> list[Message]:
        """Replies "n left, take k" against the env's own opponent: the winning take (leave a
        multiple of 4), or, flawed, always 1."""
        env = self.make_env()
        env.reset(problem)
        messages: list[Message] = []
        while True:
            take = 1 if flawed else (winning_take(env.stones) or 1)
            messages.append({"role": "assistant", "content": f"{env.stones} left, take {take}"})
            result = env.step(messages[-1]["content"])
            if result.done:
                return messages
            messages.append({"role": "user", "content": result.observation})
