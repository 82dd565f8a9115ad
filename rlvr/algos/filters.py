"""Group filters: which groups of a rollout batch carry a learning signal; and problem filters:
which train problems are worth training on at all (River's environment screening)."""

from __future__ import annotations

import torch


def varied_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Mask [B] of samples whose group has rewards that are not all equal (DAPO's dynamic
    sampling keeps only these: an all-equal group has zero group-relative advantage)."""
    _, index = torch.unique(group_ids, return_inverse=True)
    groups = int(index.max()) + 1 if len(index) else 0
    low = torch.full((groups,), float("inf"), dtype=rewards.dtype).scatter_reduce(
        0, index, rewards, "amin"
    )
    high = torch.full((groups,), float("-inf"), dtype=rewards.dtype).scatter_reduce(
        0, index, rewards, "amax"
    )
    return (high > low)[index]


def usable_samples(
    infra_error: torch.Tensor, group_ids: torch.Tensor, min_group_size: int = 1
) -> torch.Tensor:
    """Mask [B] of samples to train on: infrastructure failures (a crashed sandbox, a judge that
    answered nonsense) are not the policy's fault, so they leave their group instead of scoring
    as wrong; a group left with fewer than `min_group_size` samples is dropped whole."""
    ok = ~infra_error
    _, index = torch.unique(group_ids, return_inverse=True)
    groups = int(index.max()) + 1 if len(index) else 0
    remaining = torch.zeros(groups, dtype=torch.long).index_add_(0, index, ok.long())
    return ok & (remaining[index] >= min_group_size)


def solved_within(correct: torch.Tensor, k: int) -> torch.Tensor:
    """Mask [N] of problems an oracle solved at least once in its first k tries; correct [N, tries]
    bool. River keeps a problem only if a strong agent passes it within 2 tries: one that no
    policy solves teaches nothing, and is often one whose verifier is broken."""
    return correct[:, :k].any(dim=1)


def consistent_verifiers(reference: torch.Tensor, probes: torch.Tensor) -> torch.Tensor:
    """Mask [N] of problems whose verifier accepted the reference solution (reference [N] bool)
    and rejected every known-wrong probe reply (probes [N, P] bool, True = accepted): a verifier
    that fails its own answer, or passes an empty or another problem's answer, rewards noise."""
    return reference & ~probes.any(dim=1)
