"""The rows the training passes run on: micro-batch order (longest first, a prompt's rows kept
together, so each micro-batch pads little and shares its prompts), and episodes' side rows."""

from __future__ import annotations

import torch

from rlvr.types import Batch, Trajectory


def by_length(
    rows: torch.Tensor, lengths: torch.Tensor, units: torch.Tensor | None = None
) -> torch.Tensor:
    """`rows` ordered longest first (stable, so equal lengths keep their order). With `units`
    [B] (rows of one prompt share a unit), a unit's rows stay together, units with the longest
    row first, so a micro-batch cut from the order shares its prompts."""
    order = torch.argsort(lengths[rows], descending=True, stable=True)
    if units is not None and len(rows):
        unit = units[rows]
        longest = torch.zeros(int(unit.max()) + 1, dtype=lengths.dtype)
        longest = longest.scatter_reduce(0, unit, lengths[rows], "amax")
        # stable sorts, last key first: unit, then the unit's longest row
        order = order[torch.argsort(unit[order], stable=True)]
        order = order[torch.argsort(longest[unit[order]], descending=True, stable=True)]
    return rows[order]


def with_side_rows(
    trajectories: list[Trajectory], batch: Batch, pad_id: int
) -> tuple[Batch, torch.Tensor] | None:
    """`batch` (one row per trajectory) with every trajectory's side rows after it, and the
    episode row of each side row [R]; None when no trajectory has one. A side row of an episode
    whose loss is masked (algo.mask_truncated) is masked too."""
    owners = [i for i, t in enumerate(trajectories) for _ in t.side_rows]
    if not owners:
        return None
    rows = [
        Trajectory(t.problem, t.group_id, t.sample_index, row.token_ids, row.loss_mask,
                   row.behaviour_logprobs, turn_rewards=[], turn_ends=[])
        for t in trajectories
        for row in t.side_rows
    ]  # fmt: skip
    side = Batch.from_trajectories(rows, pad_id)
    episodes = torch.tensor(owners)
    side.loss_mask *= batch.loss_mask[episodes].any(-1, keepdim=True)
    return batch.concat(side, pad_id), episodes
