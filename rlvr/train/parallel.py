"""Parason for a batch: measure each reply's thread tree and pay correct, faster-than-sequential
rollouts on top of their reward; add the rows of threads dispatched blind to their siblings."""

from __future__ import annotations

import torch

from rlvr.algos.shaping import parallel_bonus
from rlvr.config import AlgoConfig
from rlvr.rollout.parallel import counter_for, trace_stats
from rlvr.types import Batch, Trajectory


def parallel_on(a: AlgoConfig) -> bool:
    weights = (a.parallel_accel_weight, a.parallel_subtask_beta, a.parallel_trial_beta,
               a.parallel_ratio_beta, a.parallel_latency_alpha)  # fmt: skip
    return any(weights)


def parallel_shaping(
    trajectories: list[Trajectory], group_ids: torch.Tensor, tokenizer, a: AlgoConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """The bonus [B] of each trajectory, and the batch's mean trace measurements."""
    stats = [
        trace_stats(t.response_text, counter_for(tokenizer, t.response_text)) for t in trajectories
    ]
    acceleration = torch.tensor([s.acceleration for s in stats])
    structure = torch.tensor([[s.subtask_ratio, s.trial_ratio, s.parallel_ratio] for s in stats])
    correct = torch.tensor([t.correct for t in trajectories])
    bonus = parallel_bonus(
        acceleration, structure, correct, group_ids, a.parallel_accel_weight,
        a.parallel_accel_cap,
        (a.parallel_subtask_beta, a.parallel_trial_beta, a.parallel_ratio_beta),
        a.parallel_latency_alpha,
    )  # fmt: skip
    mean = lambda values: float(sum(values) / len(values))  # noqa: E731
    return bonus, {
        "parallel/bonus": float(bonus.mean()),
        "parallel/acceleration": float(acceleration.mean()),
        "parallel/critical_path_tokens": mean([s.critical_path_tokens for s in stats]),
        "parallel/parallel_ratio": float(structure[:, 2].mean()),
        "parallel/well_formed": mean([s.well_formed for s in stats]),
        "parallel/regions": mean([s.regions for s in stats]),
    }


def with_threads(
    trajectories: list[Trajectory], batch: Batch, pad_id: int
) -> tuple[Batch, torch.Tensor] | None:
    """`batch` (one row per trajectory) with every trajectory's thread rows after it, and the
    episode row of each thread row [R]; None when no trajectory dispatched a thread of its own.
    A thread row of an episode whose loss is masked (algo.mask_truncated) is masked too."""
    owners = [i for i, t in enumerate(trajectories) for _ in t.threads]
    if not owners:
        return None
    rows = [
        Trajectory(t.problem, t.group_id, t.sample_index, row.token_ids, row.loss_mask,
                   row.behaviour_logprobs, turn_rewards=[], turn_ends=[])
        for t in trajectories
        for row in t.threads
    ]  # fmt: skip
    threads = Batch.from_trajectories(rows, pad_id)
    episodes = torch.tensor(owners)
    threads.loss_mask *= batch.loss_mask[episodes].any(-1, keepdim=True)
    return batch.concat(threads, pad_id), episodes
