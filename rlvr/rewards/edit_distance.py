"""Whole-reply string rewards: exact equality with the reference, or a dense credit that falls
with the Levenshtein distance to it (partial progress toward a string pays before a full hit).
A problem whose metadata lists `also_correct` strings accepts each of them as well."""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein

from rlvr.types import Problem, Score


def _references(problem: Problem) -> list[str]:
    if problem.answer is None:
        raise ValueError(f"problem {problem.id} has no reference answer")
    return [problem.answer, *problem.metadata.get("also_correct", ())]


# Both compare the reply as generated, whitespace included: with a verifier that accepted
# padded variants, RL on the tiny model moved nearly all the target's mass onto them.


def exact_reply(problem: Problem, response: str) -> Score:
    """1 if the whole reply is exactly the reference string, whitespace included."""
    if response in _references(problem):
        return Score(1.0, "ok")
    return Score(0.0, "wrong", {"reason": f"replied {response[:80]!r}"})


def _credit(response: str, reference: str) -> tuple[float, int]:
    distance = Levenshtein.distance(response, reference)
    return 1.0 - distance / max(len(response), len(reference), 1), distance


def levenshtein(problem: Problem, response: str) -> Score:
    """Dense credit 1 - edit distance / the longer length, in [0, 1], against the nearest reference.

    The status is ok only for an exact match, so as a verifier it still counts only hits."""
    value, distance = max(_credit(response, reference) for reference in _references(problem))
    return Score(value, "ok" if distance == 0 else "wrong", {"distance": distance})
