"""A spurious reward: a seeded coin flip that ignores the answer, the control for what RL
learns (or unlearns) from a signal that carries no information about correctness."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter

from pydantic import BaseModel, ConfigDict, Field

from rlvr.types import Problem, Score


def coin(seed: int, problem_id: str, response: str, occurrence: int, p: float) -> float:
    """1.0 with probability p, decided by a hash of the parts (stable across runs and processes)."""
    key = "\x00".join((str(seed), problem_id, response, str(occurrence))).encode()
    uniform = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
    return float(uniform < p)


class RandomReward:
    """Bernoulli(p) reward that knows nothing of the answer (spurious-reward control).

    Each call draws a fresh coin: the n-th time this reward scores a given reply to a given
    problem, the coin is seeded from (seed, problem id, reply, n). So repeated identical replies
    get independent coins, and a run reproduces: which of several identical replies gets which
    coin can change with thread timing, but identical replies are interchangeable in the update.
    (A resumed run restarts the count, so it draws new coins for replies seen before the stop.)
    """

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")

        p: float = Field(0.5, ge=0, le=1, description="Probability that a reply scores 1.")
        seed: int = Field(0, description="Mixed into every coin; another seed, other coins.")

    def __init__(self, params: Params | None = None):
        self.params = params or self.Params()
        self._seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()  # rewards are scored on several threads

    def __call__(self, problem: Problem, response: str) -> Score:
        with self._lock:
            occurrence = self._seen[problem.id, response]
            self._seen[problem.id, response] += 1
        value = coin(self.params.seed, problem.id, response, occurrence, self.params.p)
        return Score(value, "ok" if value else "wrong")
