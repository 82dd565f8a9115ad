"""Reward shaping: DAPO's soft overlong penalty, when multi-turn rewards reach the learner,
River's turn-level repetition penalty on advantages, RepExp's elliptical exploration bonus and
Parason's parallel-structure bonus."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.types import Trajectory


def overlong_penalty(
    lengths: torch.Tensor, max_tokens: int, window: int, factor: float
) -> torch.Tensor:
    """Penalty [B] (<= 0) for responses of `lengths` tokens: 0 up to max_tokens - window, then
    falling linearly to -factor at max_tokens, and -factor beyond (Yu et al., 2025, eq. 13)."""
    if window <= 0:
        return torch.zeros_like(lengths, dtype=torch.float)
    start = max_tokens - window
    return -factor * ((lengths.float() - start) / window).clamp(0.0, 1.0)


def time_rewards(turn_rewards: list[float], timing: str) -> list[float]:
    """Per-turn rewards as the learner sees them: 'per_turn' unchanged, 'delayed' all summed
    onto the last turn, 'terminal' only the last turn's (the outcome)."""
    if timing == "per_turn" or not turn_rewards:
        return list(turn_rewards)
    last = sum(turn_rewards) if timing == "delayed" else turn_rewards[-1]
    return [0.0] * (len(turn_rewards) - 1) + [last]


def jaccard(a: str, b: str) -> float:
    """|A & B| / |A | B| of the sets of whitespace-separated words of `a` and `b`; 1.0 for two
    texts without a word (both empty: the same, e.g. an empty command answered the same way)."""
    words_a, words_b = set(a.split()), set(b.split())
    union = words_a | words_b
    return len(words_a & words_b) / len(union) if union else 1.0


def turn_texts(trajectory: Trajectory, decode: Callable[[list[int]], str]) -> list[tuple[str, str]]:
    """(action, observation) text of each turn: what the policy generated in it, and what the env
    inserted after it up to the next reply ("" after the last turn). The observation includes
    the chat template's text between turns, which `decode` should drop (skip special tokens)."""
    ids, mask, ends = trajectory.token_ids, trajectory.loss_mask, trajectory.turn_ends
    texts, start = [], 0
    for turn, end in enumerate(ends):
        limit = ends[turn + 1] if turn + 1 < len(ends) else len(ids)
        stop = end  # the env's tokens run from this turn's end to the next policy token
        while stop < limit and not mask[stop]:
            stop += 1
        action = [t for t, m in zip(ids[start:end], mask[start:end]) if m]
        texts.append((decode(action), decode(ids[end:stop])))
        start = end
    return texts


def repeated_turns(turns: list[tuple[str, str]], threshold: float) -> list[bool]:
    """Which turns repeat an earlier one (River, arXiv:2608.22631): both the action and the
    observation have Jaccard similarity > threshold with those of one earlier turn, i.e. a
    command re-run with the same result. Similarity is over whitespace-separated words."""
    return [
        any(
            jaccard(action, earlier_action) > threshold
            and jaccard(observation, earlier_observation) > threshold
            for earlier_action, earlier_observation in turns[:k]
        )
        for k, (action, observation) in enumerate(turns)
    ]


def repetition_penalties(repeated: list[bool], delta: float, cap: float) -> list[float]:
    """Per-turn advantage offsets (<= 0): -delta on each repeated turn, in order, until the
    episode's total reaches -cap (River: delta 0.05, cap 0.15)."""
    offsets, total = [], 0.0
    for repeats in repeated:
        penalty = min(delta, cap - total) if repeats else 0.0
        total += penalty
        offsets.append(-penalty)
    return offsets


def turn_values_per_token(turn_values: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """[B, T]: each policy token gets its turn's value from turn_values [B, K]; 0 elsewhere
    (turn_ids [B, T] is -1 off the policy tokens)."""
    gathered = turn_values.gather(1, turn_ids.clamp(min=0))
    return torch.where(turn_ids >= 0, gathered, 0.0)


def repetition_offsets(
    trajectories: list[Trajectory],
    turn_ids: torch.Tensor,
    decode: Callable[[list[int]], str],
    threshold: float,
    delta: float,
    cap: float,
) -> tuple[torch.Tensor, float]:
    """River's advantage offsets [B, T] on every trajectory's policy tokens (`turn_ids` as
    Batch.turn_ids), and the share of the batch's turns that repeat an earlier one."""
    values = torch.zeros(len(trajectories), max(max(len(t.turn_ends) for t in trajectories), 1))
    repeated = turns = 0
    for row, trajectory in enumerate(trajectories):
        marks = repeated_turns(turn_texts(trajectory, decode), threshold)
        values[row, : len(marks)] = torch.tensor(repetition_penalties(marks, delta, cap))
        repeated, turns = repeated + sum(marks), turns + len(marks)
    return turn_values_per_token(values, turn_ids), repeated / max(turns, 1)


def elliptical_bonus(
    features: torch.Tensor,
    group_ids: torch.Tensor,
    correct: torch.Tensor,
    lam: float,
    leave_one_out: bool = False,
) -> torch.Tensor:
    """RepExp's exploration bonus [B] (arXiv 2510.11686), float64. Within each group the rollouts'
    features [B, d], centred on the group's mean, give Sigma = lam I + sum_j h_j h_j^T; rollout i
    scores its leverage l_i = h_i^T Sigma^-1 h_i, large when it points where its siblings do not.
    `leave_one_out` scores h_i^T (Sigma - h_i h_i^T)^-1 h_i instead, which is l_i / (1 - l_i)
    (Sherman-Morrison). A group with no `correct` [B] rollout gets 0: novelty among wrong
    answers is not worth rewarding."""
    bonus = torch.zeros(len(features), dtype=torch.float64)
    for group in group_ids.unique():
        rows = group_ids == group
        if not correct[rows].any():
            continue
        h = features[rows].double()
        h = h - h.mean(0)
        sigma = lam * torch.eye(h.shape[1], dtype=h.dtype) + h.T @ h
        leverage = (h * torch.linalg.solve(sigma, h.T).T).sum(-1)
        bonus[rows] = leverage / (1 - leverage) if leave_one_out else leverage
    return bonus


def group_zscores(values: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(v - group mean) / group std [B] (population std); 0 in a group whose std is <= eps."""
    z = torch.zeros_like(values, dtype=torch.float64)
    for group in group_ids.unique():
        rows = group_ids == group
        v = values[rows].double()
        std = v.std(correction=0)
        if std > eps:
            z[rows] = (v - v.mean()) / std
    return z


def parallel_bonus(
    acceleration: torch.Tensor,
    structure: torch.Tensor,
    correct: torch.Tensor,
    group_ids: torch.Tensor,
    accel_weight: float,
    accel_cap: float,
    betas: tuple[float, float, float],
    latency_alpha: float,
) -> torch.Tensor:
    """Parason's reward on top of correctness [B] (arXiv 2608.24658), paid to correct rollouts
    only: accel_weight * min(acceleration - 1, accel_cap), plus the group z-scores of the
    structure shares [B, 3] (subtask, trial, parallel ratio) weighted by `betas` and of the
    acceleration weighted by `latency_alpha`. Z-scores are taken over the whole group, wrong
    rollouts included, as the reference reward manager does."""
    bonus = accel_weight * (acceleration.double() - 1).clamp(max=accel_cap)
    for column, beta in enumerate(betas):
        if beta:
            bonus = bonus + beta * group_zscores(structure[:, column], group_ids)
    if latency_alpha:
        bonus = bonus + latency_alpha * group_zscores(acceleration, group_ids)
    return torch.where(correct.bool(), bonus, 0.0)
