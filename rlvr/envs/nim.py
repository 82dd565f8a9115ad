"""Nim against a scripted opponent: take 1 to 3 stones in turn; whoever takes the last one wins."""

from __future__ import annotations

import random
import re

from rlvr.types import Message, Problem, StepResult

_LAST_NUMBER = re.compile(r"-?\d+(?=\D*$)")
MAX_TAKE = 3


def winning_take(stones: int) -> int | None:
    """The take that leaves a multiple of 4 (a lost position for the mover), if there is one."""
    take = stones % (MAX_TAKE + 1)
    return take or None


class NimEnv:
    """The pile starts at problem.metadata["stones"]; the policy moves first. Each reply ends
    with how many stones it takes; the opponent then plays the winning take with probability
    `opponent_skill`, else a random one, seeded by the problem, and reports "I take k, n left".
    The last step's reward is the outcome (1 for taking the last stone); earlier steps pay
    `good_move_reward` for a move that leaves the opponent a multiple of 4."""

    def __init__(self, opponent_skill: float = 0.5, good_move_reward: float = 0.1):
        self.opponent_skill, self.good_move_reward = opponent_skill, good_move_reward

    def reset(self, problem: Problem) -> list[Message]:
        self.stones = int(problem.metadata["stones"])
        self.rng = random.Random(f"nim:{problem.id}")
        return problem.messages()

    def step(self, action_text: str) -> StepResult:
        match = _LAST_NUMBER.search(action_text)
        take = int(match.group()) if match else None
        if take is None or not 1 <= take <= min(MAX_TAKE, self.stones):
            legal = min(MAX_TAKE, self.stones)
            return StepResult(f"take 1 to {legal} stones, {self.stones} left", 0.0, False, {})
        good = winning_take(self.stones) == take
        self.stones -= take
        if self.stones == 0:
            return StepResult(None, 1.0, True, {"correct": True, "status": "ok"})
        reply = winning_take(self.stones)
        if reply is None or self.rng.random() >= self.opponent_skill:
            reply = self.rng.randint(1, min(MAX_TAKE, self.stones))
        self.stones -= reply
        if self.stones == 0:
            return StepResult(None, 0.0, True, {"correct": False, "status": "wrong"})
        observation = f"I take {reply}, {self.stones} left"
        return StepResult(observation, self.good_move_reward * good, False, {})
