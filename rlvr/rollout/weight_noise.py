"""3PO / C3PO's weight draws as sampling sees them: the posterior a draw comes from (built by
rlvr/methods/c3po.py from IVON) and which draw samples which reply of a group."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol


class WeightNoise(Protocol):
    """A posterior over the trainable weights that replies are sampled under."""

    samples: int  # weight draws per step; each samples group_size / samples replies of a group

    def sampled(self, seed: int) -> AbstractContextManager:
        """Inside, the trainable weights are one draw, fixed by `seed` (the same seed, the same
        draw: a multi-turn episode keeps its weights every turn); after, exactly the mean."""

    def metrics(self) -> dict[str, float]:
        """The posterior's spread, logged with the rollout's stats."""


def weight_sample_of(sample_index: int, group_size: int, weight_samples: int) -> int:
    """Which weight draw samples reply `sample_index` (numbered over the batch): each group's
    replies split into `weight_samples` contiguous runs of group_size / weight_samples."""
    return (sample_index % group_size) // (group_size // weight_samples)
