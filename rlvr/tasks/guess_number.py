"""Guess-the-number as a task: secrets to find, and binary-search demonstrations to warm-start on."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rlvr.envs.guess_number import GuessNumberEnv
from rlvr.tasks.base import seeded_rng
from rlvr.types import Message, Problem


class GuessNumberParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_number: int = Field(
        16, ge=2, le=1000, description="The secret is drawn from 1..max_number."
    )
    max_guesses: int = Field(
        8, ge=1, description="Guesses allowed; the episode fails after the last wrong one."
    )
    consistency_reward: float = Field(
        0.1,
        ge=0,
        description="Per-turn reward for a guess inside the range the feedback so far allows.",
    )


class GuessNumberTask:
    """Find a secret number in a few guesses from higher/lower feedback (multi-turn)."""

    name = "guess_number"
    verifier = None  # the env scores the episode
    Params = GuessNumberParams
    # examples/guess_number.toml: replies are short, and games cost several turns each.
    recommended_tiny = {"rollout.batch_size": 64, "rollout.max_new_tokens": 24}

    def __init__(self, params: GuessNumberParams, seed: int, eval_size: int):
        self.params, self.seed, self.eval_size = params, seed, eval_size

    def _problem(self, id: str, secret: int) -> Problem:
        prompt = f"Guess my number from 1 to {self.params.max_number}."
        return Problem(id=id, prompt=prompt, answer=str(secret), domain="guess_number")

    def train_problem(self, index: int) -> Problem:
        secret = seeded_rng(self.seed, "train", index).randint(1, self.params.max_number)
        return self._problem(f"guess-train-{index}", secret)

    def eval_problems(self) -> list[Problem]:
        """Every secret in turn, so eval measures the whole range (the game has no other input)."""
        n = self.params.max_number
        return [self._problem(f"guess-eval-{i}", i % n + 1) for i in range(self.eval_size)]

    def make_env(self, reward=None, verifier=None) -> GuessNumberEnv:
        p = self.params
        return GuessNumberEnv(p.max_number, p.max_guesses, p.consistency_reward)

    def demonstration(self, problem: Problem, flawed: bool = False) -> list[Message]:
        """Replies "range lo-hi, guess g" with the env's feedback between them: binary search
        (g the midpoint), or, flawed, a linear scan from the bottom (g = lo), which is slower
        and runs out of guesses when the secret is high."""
        secret, low, high = int(problem.answer), 1, self.params.max_number
        messages: list[Message] = []
        for turn in range(self.params.max_guesses):
            guess = low if flawed else (low + high) // 2
            messages.append({"role": "assistant", "content": f"range {low}-{high}, guess {guess}"})
            if guess == secret or turn == self.params.max_guesses - 1:
                break
            low, high = (guess + 1, high) if guess < secret else (low, guess - 1)
            messages.append({"role": "user", "content": "higher" if guess < secret else "lower"})
        return messages
