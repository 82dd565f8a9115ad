"""Micro-batch order for the training passes: rows sorted longest first, a prompt's rows kept
together, so each micro-batch pads little and shares its prompts."""

from __future__ import annotations

import torch


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
