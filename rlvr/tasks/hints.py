"""Hints: a problem's reference rationale cut into segments, and a prompt that shows the first
few. RGPO re-rolls failed groups with them; a tiny model's warm start learns to read them."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from rlvr.types import Problem


def rationale_segments(rationale: str, count: int) -> list[str]:
    """`rationale` cut into `count` consecutive pieces that join back to it: whole lines where it
    has enough of them, else whole words, else characters (some pieces may be empty then)."""
    units = rationale.splitlines(keepends=True)
    if len(units) < count:
        units = re.split(r"(?<=\s)(?=\S)", rationale)  # each word with the space after it
    if len(units) < count:
        units = list(rationale)
    return ["".join(part) for part in np.array_split(np.array(units, dtype=object), count)]


def hinted(problem: Problem, hint: str) -> Problem:
    """The problem with `hint` appended to its last user message; answer and id unchanged, so the
    same verifier scores the revised reply."""
    if isinstance(problem.prompt, str):
        return replace(problem, prompt=f"{problem.prompt}\n\nHint: {hint}")
    messages = problem.messages()
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[last] = dict(messages[last], content=f"{messages[last]['content']}\n\nHint: {hint}")
    return replace(problem, prompt=messages)
