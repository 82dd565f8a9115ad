"""Verifiable instruction-following checks in the IFEval style, and the reward that applies them.

A problem lists its constraints in `metadata["constraints"]`, e.g.
`[{"check": "max_words", "n": 50}, {"check": "include_keywords", "keywords": ["Paris"]}]`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from rlvr.types import Problem, Score

BULLET = re.compile(r"^\s*[*-]\s+\S", re.MULTILINE)


def _words(text: str) -> list[str]:
    return re.findall(r"\b\w+\b", text)


def min_words(response: str, n: int) -> bool:
    """At least n words."""
    return len(_words(response)) >= n


def max_words(response: str, n: int) -> bool:
    """At most n words."""
    return len(_words(response)) <= n


def include_keywords(response: str, keywords: list[str]) -> bool:
    """Every keyword appears (case-insensitive, whole words)."""
    return all(re.search(rf"\b{re.escape(k)}\b", response, re.IGNORECASE) for k in keywords)


def forbidden_words(response: str, words: list[str]) -> bool:
    """None of the words appears (case-insensitive, whole words)."""
    return not any(re.search(rf"\b{re.escape(w)}\b", response, re.IGNORECASE) for w in words)


def json_format(response: str) -> bool:
    """The whole response is valid JSON (a surrounding ``` fence is allowed)."""
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", response.strip())
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def bullet_list(response: str, n: int) -> bool:
    """Exactly n markdown bullet points ('* ' or '- ')."""
    return len(BULLET.findall(response)) == n


def lowercase(response: str) -> bool:
    """No uppercase letters."""
    return response == response.lower()


def uppercase(response: str) -> bool:
    """No lowercase letters."""
    return response == response.upper()


def no_commas(response: str) -> bool:
    """No commas at all."""
    return "," not in response


def end_with(response: str, phrase: str) -> bool:
    """Ends with the exact phrase (trailing whitespace ignored)."""
    return response.rstrip().endswith(phrase)


def paragraphs(response: str, n: int) -> bool:
    """Exactly n paragraphs, separated by blank lines."""
    return len([p for p in re.split(r"\n\s*\n", response.strip()) if p.strip()]) == n


CHECKS: dict[str, Callable[..., bool]] = {
    "min_words": min_words,
    "max_words": max_words,
    "include_keywords": include_keywords,
    "forbidden_words": forbidden_words,
    "json_format": json_format,
    "bullet_list": bullet_list,
    "lowercase": lowercase,
    "uppercase": uppercase,
    "no_commas": no_commas,
    "end_with": end_with,
    "paragraphs": paragraphs,
}


def ifeval(problem: Problem, response: str) -> Score:
    """Share of the problem's instruction constraints the response satisfies (IFEval-style checks)."""
    constraints = problem.metadata.get("constraints")
    if not constraints:
        raise ValueError(f"problem {problem.id} has no metadata['constraints'] to check")
    results = {}
    for i, constraint in enumerate(constraints):
        kwargs = dict(constraint)
        name = kwargs.pop("check", None)
        if name not in CHECKS:
            raise ValueError(
                f"problem {problem.id}: unknown check {name!r}; known: {', '.join(CHECKS)}"
            )
        results[f"{i}:{name}"] = float(CHECKS[name](response, **kwargs))
    value = sum(results.values()) / len(results)
    return Score(value, "ok" if value == 1.0 else "wrong", results)
