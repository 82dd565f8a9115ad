"""Penalty components for reward sums and gates: overlong and repetitive responses score below 0."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlvr.types import Problem, Score

_TOKEN = re.compile(r"\w+|[^\w\s]")


class LengthPenalty:
    """0 up to `target_chars` characters, falling linearly to -1 at `max_chars` and beyond."""

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")

        target_chars: int = Field(400, ge=0, description="Longest response with no penalty.")
        max_chars: int = Field(1200, gt=0, description="Length at which the penalty reaches -1.")

        @model_validator(mode="after")
        def _ordered(self):
            if self.max_chars <= self.target_chars:
                raise ValueError(
                    f"max_chars ({self.max_chars}) must exceed target_chars ({self.target_chars})"
                )
            return self

    def __init__(self, params: Params | None = None):
        self.params = params or self.Params()

    def __call__(self, problem: Problem, response: str) -> Score:
        p = self.params
        excess = (len(response) - p.target_chars) / (p.max_chars - p.target_chars)
        return Score(-min(max(excess, 0.0), 1.0), "ok", {"chars": len(response)})


class RepetitionPenalty:
    """Minus the share of word n-grams that repeat an earlier one in the response (0 to -1).

    0 means no repeats; a response that loops on one phrase scores near -1."""

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")

        ngram: int = Field(3, gt=0, description="Length of the compared n-grams, in words.")

    def __init__(self, params: Params | None = None):
        self.params = params or self.Params()

    def __call__(self, problem: Problem, response: str) -> Score:
        n = self.params.ngram
        tokens = _TOKEN.findall(response.lower())
        grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
        if not grams:
            return Score(0.0, "ok")
        repeated = len(grams) - len(set(grams))
        return Score(-repeated / len(grams), "ok", {"repeated_ngrams": repeated})
