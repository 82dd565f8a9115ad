"""Mathematical equivalence of the final answer and the reference, decided by math-verify."""

from __future__ import annotations

import threading

from math_verify import parse, verify

from rlvr.rewards.answers import marked_answer, strip_units
from rlvr.rewards.match import normalize
from rlvr.types import Problem, Score


def _timeout() -> int | None:
    # math-verify times out with SIGALRM, which raises outside the main thread; there we run
    # without its timeout and rely on the caller's.
    return 5 if threading.current_thread() is threading.main_thread() else None


def _parse(text: str) -> list:
    # Read a bare answer as LaTeX first: plain parsing misses "\sqrt{2}" and reads "1+x^2" as 1.
    text = strip_units(normalize(text))
    return parse(f"${text}$", parsing_timeout=_timeout()) or parse(text, parsing_timeout=_timeout())


def math_equal(problem: Problem, response: str) -> Score:
    """Final answer is mathematically equal to the reference (math-verify: LaTeX, sets, fractions)."""
    if problem.answer is None:
        raise ValueError(f"problem {problem.id} has no reference answer")
    gold = _parse(problem.answer)
    if not gold:
        raise ValueError(
            f"problem {problem.id}: math-verify cannot parse reference {problem.answer!r}"
        )
    marked = marked_answer(response)
    # Without a marker, math-verify's own extraction finds the answer in the free text.
    predicted = _parse(marked[0]) if marked else parse(response, parsing_timeout=_timeout())
    if not predicted:
        return Score(0.0, "wrong", {"reason": "no parsable answer"})
    if verify(gold, predicted, timeout_seconds=_timeout()):
        return Score(1.0, "ok")
    return Score(0.0, "wrong", {"reason": f"answered {predicted[-1]!s}"})
