"""Find the final answer in a model's response: \\boxed{}, `#### x`, <answer></answer>, or the last number."""

from __future__ import annotations

import re

_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# A sign only when it is not an operator between operands: "8-3" ends in 3, not -3.
_NUMBER = re.compile(r"(?:(?<![\w)])[-+])?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


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


def extract_answer(text: str) -> str | None:
    """The last \\boxed{...}, else `#### x`, else the last <answer>...</answer>, else the last number."""
    marked = marked_answer(text)
    if marked is not None:
        return marked[0]
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None
