"""Find the final answer in a model's response: \\boxed{}, `#### x` or <answer></answer> (the last
number only when a reward asks for that fallback)."""

from __future__ import annotations

import re
from typing import Literal

_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# A sign only when it is not an operator between operands: "8-3" ends in 3, not -3.
_NUMBER = re.compile(r"(?:(?<![\w)])[-+])?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


# "12 dollars", "5 cm", "1,234 apples": a number followed by up to three plain words.
_NUMBER_WITH_UNITS = re.compile(
    r"(\$?[-+]?\d[\d,]*(?:\.\d+)?(?:/\d+)?%?)\s+((?:[a-zA-Z]{2,}\.?\s*){1,3})"
)
# Words that are mathematics, not units: "3 pi" is not 3.
_MATH_WORDS = {"pi", "sqrt", "ln", "log", "sin", "cos", "tan", "exp", "inf", "infinity", "and"}


def strip_units(text: str) -> str:
    """The number alone when `text` is a number followed by unit words, else `text` unchanged."""
    match = _NUMBER_WITH_UNITS.fullmatch(text.strip())
    if match is None:
        return text
    words = {w.strip(".").lower() for w in match.group(2).split()}
    return text if words & _MATH_WORDS else match.group(1)


def _last_boxed(text: str) -> tuple[str, int] | None:
    start = text.rfind("\\boxed{")
    while start != -1:
        depth = 0
        for i in range(start + len("\\boxed"), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start + len("\\boxed{") : i].strip(), i + 1
        # Unbalanced (e.g. truncated generation): fall back to an earlier complete one.
        start = text.rfind("\\boxed{", 0, start)
    return None


def marked_answer(text: str) -> tuple[str, int] | None:
    """The answer after the strongest final-answer marker, and the index where that marker ends."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    for pattern in (_HASHES, _ANSWER_TAG):
        matches = [m for m in pattern.finditer(text) if m.group(1).strip()]
        if matches:
            return matches[-1].group(1).strip(), matches[-1].end()
    return None


Fallback = Literal["none", "last_number"]


def extract_answer(text: str, fallback: Fallback = "none") -> str | None:
    """The last \\boxed{...}, else `#### x`, else the last <answer>...</answer>; with
    fallback="last_number", else the last number. Without a marker there is no answer by
    default: the last number of any reply would pay a model for spraying digits."""
    marked = marked_answer(text)
    if marked is not None:
        return marked[0]
    if fallback == "last_number":
        numbers = _NUMBER.findall(text)
        return numbers[-1] if numbers else None
    return None


def reference_answer(reference: str) -> str:
    """A reference given as a worked solution ("22+11=33 #### 33") reduced to its marked
    answer; a bare reference unchanged."""
    marked = marked_answer(reference)
    return reference if marked is None else marked[0]
