"""Mathematical equivalence of the final answer and the reference, decided by math-verify."""

from __future__ import annotations

import logging
import threading
from typing import Literal

from math_verify import parse, verify
from pydantic import BaseModel, ConfigDict, Field

from rlvr.rewards.answers import marked_answer, reference_answer, strip_units
from rlvr.rewards.match import NO_MARKER, normalize
from rlvr.types import Problem, Score


def _not_timeout_notice(record: logging.LogRecord) -> bool:
    return "Timeout is disabled" not in record.getMessage()


# Off the main thread math-verify runs without its own timeout and says so; rlvr's reward
# runner enforces task.reward_timeout there, so the notice is only noise.
for _module in ("math_verify.grader", "math_verify.parser"):
    logging.getLogger(_module).addFilter(_not_timeout_notice)


def _timeout() -> int | None:
    # math-verify times out with SIGALRM, which raises outside the main thread; there we run
    # without its timeout and rely on the caller's.
    return 5 if threading.current_thread() is threading.main_thread() else None


def _parse(text: str) -> list:
    # Read a bare answer as LaTeX first: plain parsing misses "\sqrt{2}" and reads "1+x^2" as 1.
    text = strip_units(normalize(text))
    return parse(f"${text}$", parsing_timeout=_timeout()) or parse(text, parsing_timeout=_timeout())


def math_equal(
    problem: Problem, response: str, fallback: Literal["none", "free_text"] = "none"
) -> Score:
    """Marked final answer is mathematically equal to the reference (math-verify: LaTeX, sets,
    fractions); with fallback="free_text", math-verify finds an unmarked answer in the reply."""
    if problem.answer is None:
        raise ValueError(f"problem {problem.id} has no reference answer")
    gold = _parse(reference_answer(problem.answer))
    if not gold:
        raise ValueError(
            f"problem {problem.id}: math-verify cannot parse reference {problem.answer!r}"
        )
    marked = marked_answer(response)
    if marked is None and fallback == "none":
        return Score(0.0, "wrong", {"reason": NO_MARKER})
    predicted = _parse(marked[0]) if marked else parse(response, parsing_timeout=_timeout())
    if not predicted:
        return Score(0.0, "wrong", {"reason": "no parsable answer"})
    if verify(gold, predicted, timeout_seconds=_timeout()):
        return Score(1.0, "ok")
    return Score(0.0, "wrong", {"reason": f"answered {predicted[-1]!s}"})


class MathEqual:
    """Marked final answer is mathematically equal to the reference (math-verify).

    math-verify decides equality across LaTeX, sets, intervals and fractions."""

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")

        fallback: Literal["none", "free_text"] = Field(
            "none",
            description="When the reply has no final-answer marker (#### x, \\boxed{x}, "
            "<answer>x</answer>): 'none' scores it wrong; 'free_text' lets math-verify find an "
            "answer anywhere in the reply (its last number included), which pays a model for "
            "spraying numbers.",
        )

    def __init__(self, params: Params | None = None):
        self.params = params or self.Params()

    def __call__(self, problem: Problem, response: str) -> Score:
        return math_equal(problem, response, self.params.fallback)
