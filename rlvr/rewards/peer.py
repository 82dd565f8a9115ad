"""Label-free rewards from other samples' answers: agreement with a peer's majority vote (Co-RL)
or with one's own (TTRL), with the answer read the way the task's verifier reads it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rlvr.rewards.answers import Fallback, extract_answer, strip_units
from rlvr.rewards.match import normalize, parse_number


def _reply(text: str, fallback: Fallback) -> str | None:
    return text or None  # exact_reply compares the whole reply, whitespace included


def _marked(text: str, fallback: Fallback) -> str | None:
    answer = extract_answer(text, fallback)
    return None if answer is None else normalize(answer)


def _number(text: str, fallback: Fallback) -> str | None:
    answer = extract_answer(text, fallback)
    value = None if answer is None else parse_number(strip_units(answer))
    return None if value is None else str(value)  # '1,234', '1234.0' and '2468/2' vote together


# The verifiers whose answer a vote can read: {verifier name: (reply, where an unmarked reply's
# answer is read) -> the answer, or None}.
ANSWER_KEYS: dict[str, Callable[[str, Fallback], str | None]] = {
    "exact_reply": _reply,
    "levenshtein": _reply,
    "exact": _marked,
    "math": _marked,
    "numeric": _number,
}


def answer_reader(verifier: str | None, reward_params: dict) -> Callable[[str], str | None]:
    """The answer of a reply as `verifier` reads it (with its configured fallback); a verifier
    whose answers cannot be read gives None for every reply."""
    fallback = reward_params.get(verifier, {}).get("fallback", "none")
    read = ANSWER_KEYS.get(verifier, lambda text, fallback: None)
    return lambda text: read(text, fallback)


def majority_vote(answers: list[str | None]) -> str | None:
    """The most frequent answer (None is no answer and never wins); a tie goes to the answer
    seen first, so the vote does not depend on hashing."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    return max(counts, key=lambda a: (counts[a], -answers.index(a)))


def agreement_rewards(answers: list[str | None], label: str | None) -> list[float]:
    """1 for each answer equal to the pseudo-label, else 0 (no label: nothing agrees)."""
    return [float(label is not None and a == label) for a in answers]
