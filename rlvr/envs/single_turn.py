"""A single-turn task as a one-step Env: the reply is scored and the episode ends."""

from __future__ import annotations

from collections.abc import Callable

from rlvr.types import Message, Problem, Score, StepResult

RewardFn = Callable[[Problem, str], Score]


class SingleTurnEnv:
    """Score one reply with `reward`; `verifier` decides whether it counts as correct (accuracy)."""

    def __init__(self, reward: RewardFn, verifier: RewardFn):
        self.reward = reward
        self.verifier = verifier
        self.problem: Problem | None = None

    def reset(self, problem: Problem) -> list[Message]:
        self.problem = problem
        return problem.messages()

    def step(self, action_text: str) -> StepResult:
        score = self.reward(self.problem, action_text)
        check = score if self.verifier is self.reward else self.verifier(self.problem, action_text)
        info = {
            "status": score.status,
            "correct": check.status == "ok" and check.value > 0,
            "components": {k: v for k, v in score.info.items() if isinstance(v, (int, float))},
        }
        if "error" in score.info:  # shown by the trainer and kept in reward_errors.jsonl
            info["error"] = score.info["error"]
        return StepResult(observation=None, reward=score.value, done=True, info=info)
