"""Guess-the-number: a multi-turn game where each guess is answered "higher" or "lower"."""

from __future__ import annotations

import re

from rlvr.types import Message, Problem, StepResult

_LAST_NUMBER = re.compile(r"-?\d+(?=\D*$)")


class GuessNumberEnv:
    """The secret is `problem.answer`. Each turn's reply ends with a guess; the env says
    "higher", "lower" or ends the episode. The last step's reward is the outcome (1 if the
    number was found within `max_guesses`, else 0); earlier steps pay `consistency_reward`
    for a guess inside the range the feedback so far allows (a turn-level signal)."""

    def __init__(self, max_number: int, max_guesses: int, consistency_reward: float = 0.1):
        self.max_number, self.max_guesses = max_number, max_guesses
        self.consistency_reward = consistency_reward

    def reset(self, problem: Problem) -> list[Message]:
        self.secret = int(problem.answer)
        self.low, self.high, self.guesses = 1, self.max_number, 0
        return problem.messages()

    def step(self, action_text: str) -> StepResult:
        self.guesses += 1
        match = _LAST_NUMBER.search(action_text)
        guess = int(match.group()) if match else None
        info = {"guesses": self.guesses, "correct": guess == self.secret}
        if guess == self.secret:
            return StepResult(None, 1.0, True, {**info, "status": "ok"})
        if self.guesses >= self.max_guesses:
            return StepResult(None, 0.0, True, {**info, "status": "wrong"})
        if guess is None:
            return StepResult(f"say a number from 1 to {self.max_number}", 0.0, False, info)
        consistent = self.low <= guess <= self.high
        if guess < self.secret:
            self.low, feedback = max(self.low, guess + 1), "higher"
        else:
            self.high, feedback = min(self.high, guess - 1), "lower"
        return StepResult(feedback, self.consistency_reward * consistent, False, info)
