"""Whole-reply string rewards: exact equality with the reference, or a dense credit that falls
with the Levenshtein distance to it (partial progress toward a string pays before a full hit)."""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein

from rlvr.types import Problem, Score


def _reference(problem: Problem) -> str:
    if problem.answer is None:
        raise ValueError(f"problem {problem.id} has no reference answer")
    return problem.answer


# Both compare the reply as generated, whitespace included: with a verifier that accepted
# padded variants, RL on the tiny model moved nearly all the target's mass onto them.


def exact_reply(problem: Problem, response: str) -> Score:
    """1 if the whole reply is exactly the reference string, whitespace included."""
    if response == _reference(problem):
        return Score(1.0, "ok")
    return Score(0.0, "wrong", {"reason": f"replied {response[:80]!r}"})


def levenshtein(problem: Problem, response: str) -> Score:
    """Dense credit 1 - edit distance / the longer length, in [0, 1], against the reference.

    The status is ok only for an exact match, so as a verifier it still counts only hits."""
    reference = _reference(problem)
    distance = Levenshtein.distance(response, reference)
    value = 1.0 - distance / max(len(response), len(reference), 1)
    return Score(value, "ok" if distance == 0 else "wrong", {"distance": distance})
