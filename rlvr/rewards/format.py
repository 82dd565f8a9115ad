"""Reward for ending with a final-answer marker the extractor recognises, whatever the answer."""

from __future__ import annotations

from rlvr.rewards.answers import marked_answer
from rlvr.types import Problem, Score

# What may trail the marker: a closing math delimiter, a full stop, whitespace.
_TRAILING = " \t\r\n.$\\])"


def format_reward(problem: Problem, response: str) -> Score:
    """1 if the response ends with `#### x`, \\boxed{x} or <answer>x</answer>, else 0."""
    marked = marked_answer(response)
    if marked is not None and not response[marked[1] :].strip(_TRAILING):
        return Score(1.0, "ok")
    return Score(0.0, "wrong", {"reason": "no final-answer marker at the end"})
