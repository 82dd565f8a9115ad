"""Compare the extracted final answer with the reference: as normalised strings, or as numbers."""

from __future__ import annotations

import re
from fractions import Fraction

from pydantic import BaseModel, ConfigDict, Field

from rlvr.rewards.answers import Fallback, extract_answer, reference_answer, strip_units
from rlvr.types import Problem, Score


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip()).removesuffix(".").strip()


# No exponents: Fraction("1e999999999") would try to build that integer.
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?")
DEFAULT_TOLERANCE = 1e-6


def parse_number(text: str) -> Fraction | None:
    """'1,234', '-3/4', '+0.5' -> an exact Fraction; anything else -> None."""
    text = normalize(text).replace(",", "")
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):  # a zero denominator, or too many digits
        return None


def numbers_equal(a: Fraction, b: Fraction, tolerance: float = DEFAULT_TOLERANCE) -> bool:
    """Equal within `tolerance`, relative to the larger magnitude (absolute below 1)."""
    # Exact arithmetic: floats would overflow on a model's 400-digit "answer".
    return abs(a - b) <= Fraction(tolerance) * max(abs(a), abs(b), 1)


def _reference(problem: Problem) -> str:
    if problem.answer is None:
        raise ValueError(f"problem {problem.id} has no reference answer")
    return reference_answer(problem.answer)


NO_MARKER = "no final-answer marker (#### x, \\boxed{x} or <answer>x</answer>)"


def _no_answer(predicted: str | None) -> Score:
    return Score(
        0.0, "wrong", {"reason": NO_MARKER if predicted is None else f"answered {predicted!r}"}
    )


def exact_match(problem: Problem, response: str) -> Score:
    """Marked final answer equals the reference as a string.

    Whitespace and a trailing period are ignored."""
    predicted = extract_answer(response)
    if predicted is None:
        return _no_answer(None)
    if normalize(predicted) == normalize(_reference(problem)):
        return Score(1.0, "ok")
    return Score(0.0, "wrong", {"reason": f"answered {predicted!r}"})


def numeric_match(
    problem: Problem,
    response: str,
    tolerance: float = DEFAULT_TOLERANCE,
    fallback: Fallback = "none",
) -> Score:
    """Final answer equals the reference as a number ('1,234', '3/4', '-2.5', '12 dollars')."""
    reference = parse_number(strip_units(_reference(problem)))
    if reference is None:
        raise ValueError(f"problem {problem.id}: reference {problem.answer!r} is not a number")
    predicted = extract_answer(response, fallback)
    value = None if predicted is None else parse_number(strip_units(predicted))
    if value is None:
        return _no_answer(predicted)
    if numbers_equal(value, reference, tolerance):
        return Score(1.0, "ok")
    return Score(0.0, "wrong", {"reason": f"answered {predicted!r}"})


class NumericMatch:
    """Final answer equals the reference as a number ('1,234', '3/4', '-2.5', '12 dollars')."""

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")

        tolerance: float = Field(
            DEFAULT_TOLERANCE,
            ge=0,
            description="Largest accepted difference, relative to the larger magnitude "
            "(absolute below 1).",
        )
        fallback: Fallback = Field(
            "none",
            description="Where the answer is read when the reply has no final-answer marker "
            "(#### x, \\boxed{x}, <answer>x</answer>): 'none' scores it wrong; 'last_number' "
            "takes the last number in the reply, which pays a model for spraying digits.",
        )

    def __init__(self, params: Params | None = None):
        self.params = params or self.Params()

    def __call__(self, problem: Problem, response: str) -> Score:
        return numeric_match(problem, response, self.params.tolerance, self.params.fallback)


def exact_at(problem: Problem, response: str) -> Score:
    """The reply's character number metadata['answer_at'] (from 1) equals the reference.

    The answer sits at a fixed place after free scratch work, with no marker, so an untrained
    model's replies can be graded before it has learned any format (graph_walk's tokens
    layout); what follows that character is ignored."""
    at = problem.metadata.get("answer_at")
    if not isinstance(at, int) or at < 1:
        raise ValueError(
            f"problem {problem.id} has no answer position (metadata['answer_at'], an int from "
            "1); exact_at needs one: graph_walk gives it with task.layout = 'tokens'"
        )
    if len(response) < at:
        return Score(
            0.0, "wrong", {"reason": f"reply of {len(response)} characters ends before {at}"}
        )
    if response[at - 1] == _reference(problem):
        return Score(1.0, "ok")
    return Score(0.0, "wrong", {"reason": f"answered {response[at - 1]!r}"})
