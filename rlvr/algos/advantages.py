"""Advantage estimators: fn(AdvInputs, AlgoConfig) -> advantages [B, T], zero off the loss mask."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlvr.config import AlgoConfig


@dataclass
class AdvInputs:
    rewards: torch.Tensor  # [B] scalar reward per trajectory
    group_ids: torch.Tensor  # [B] long; trajectories of one prompt share an id
    loss_mask: torch.Tensor  # [B, T] 1 on policy tokens


AdvantageFn = Callable[[AdvInputs, AlgoConfig], torch.Tensor]


def group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element mean and unbiased std of its group. values, group_ids: [B]."""
    _, index, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    sums = torch.zeros(len(counts), dtype=values.dtype).index_add_(0, index, values)
    means = sums / counts
    sq = torch.zeros(len(counts), dtype=values.dtype).index_add_(
        0, index, (values - means[index]) ** 2
    )
    stds = (sq / (counts - 1).clamp(min=1)).sqrt()
    return means[index], stds[index]


def grpo(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """GRPO: reward minus its group mean, divided by the group std unless normalize_std=False."""
    mean, std = group_stats(inputs.rewards.double(), inputs.group_ids)
    adv = inputs.rewards.double() - mean
    if algo.normalize_std:
        adv = adv / (std + 1e-6)
    return adv.float()[:, None] * inputs.loss_mask.float()


grpo.min_group_size = 2  # a group of one has no baseline to compare against

ADVANTAGES: dict[str, AdvantageFn] = {"grpo": grpo}
