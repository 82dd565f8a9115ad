"""The Engine protocol: token ids in, sampled token ids and their logprobs out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from transformers import PreTrainedModel

from rlvr.types import SideRow


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[
        float
    ]  # under the distribution actually sampled from (after temperature/top-p/top-k)
    finish_reason: str  # "eos" | "stop" | "length"
    text: str = field(default="")
    # 1 on the tokens the update trains on; None: all of them (W2SPO trains a weak branch only)
    trained: list[int] | None = None
    # tokens sampled in other contexts, trained as their own rows (Parason's blind threads);
    # None: the call sampled none (an empty list: it could have, and did not need to)
    side_rows: list[SideRow] | None = None


class Engine(Protocol):
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Sample one completion per prompt; `seeds[i]` alone determines prompt i's randomness."""
        ...

    def load_weights(self, model: PreTrainedModel) -> None:
        """Take the policy's current weights after an update (a no-op when the engine samples
        with the training model itself); raise rather than hang or keep stale weights."""
        ...

    def release_memory(self) -> None:
        """Free what sampling holds (KV cache) while the policy updates; the next load_weights
        or generate takes it back. A no-op where nothing is held."""
        ...


def is_greedy(
    prompts: Sequence[Sequence[int]], params: SamplingParams, seeds: Sequence[int] | None
) -> bool:
    """Whether a generate call decodes greedily; a sampling call must bring one seed per prompt."""
    greedy = params.temperature == 0
    if not greedy and (seeds is None or len(seeds) != len(prompts)):
        raise ValueError("sampling needs one seed per prompt (pass seeds=...)")
    return greedy


def sample_seed(*parts: int) -> int:
    """A 63-bit seed from (seed, stream, step, sample index): stable across runs and resumes."""
    return int(
        np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0]
        >> 1
    )
