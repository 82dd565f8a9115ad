"""The environment protocol the episode runner drives: reset with a problem, then step with actions."""

from __future__ import annotations

from typing import Protocol

from rlvr.types import Message, Problem, StepResult


class Env(Protocol):
    def reset(self, problem: Problem) -> list[Message]:
        """Start an episode; return the conversation the policy answers first."""
        ...

    def step(self, action_text: str) -> StepResult:
        """Take the policy's reply; return the next observation (a user turn), reward and done.

        `info` may carry `status` (a Score status), `correct` (bool) and per-component rewards.
        """
        ...
