"""What one step's trajectories say: reward, accuracy, statuses, lengths, episode endings."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable

import torch

from rlvr.rollout.runner import ENDINGS
from rlvr.types import STATUSES, Trajectory


def batch_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    rewards = torch.tensor([t.reward for t in trajectories])
    statuses = Counter(t.status for t in trajectories)
    metrics = {
        "reward": float(rewards.mean()),
        "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "accuracy": sum(t.correct for t in trajectories) / len(trajectories),
        "response_length": sum(t.num_generated for t in trajectories) / len(trajectories),
        "truncated": sum(t.finish_reason == "length" for t in trajectories) / len(trajectories),
    }
    # Per-sequence entropy H(reply | prompt), estimated by -log pi(reply) of the sampled replies
    # (its expectation); the update logs the per-token "entropy". Replayed logs have no logprobs.
    logprob = sum(sum(t.behaviour_logprobs) for t in trajectories)
    if math.isfinite(logprob):
        metrics["entropy/sequence"] = -logprob / len(trajectories)
    metrics.update({f"status/{s}": statuses[s] / len(trajectories) for s in STATUSES if s != "ok"})
    scores = defaultdict(set)
    for t in trajectories:
        scores[t.group_id].add(t.reward)
    # groups whose replies all scored alike: no signal for a group-relative advantage
    metrics["uniform_groups"] = sum(len(s) == 1 for s in scores.values()) / len(scores)
    n = len(trajectories)
    turns = [len(t.turn_rewards) for t in trajectories]
    metrics["episode/turns"] = sum(turns) / n
    metrics["episode/turn_reward"] = sum(t.reward for t in trajectories) / sum(turns)
    metrics["episode/tool_calls"] = sum(t.info.get("tool_calls", 0) for t in trajectories) / n
    metrics["episode/tool_errors"] = sum(t.info.get("tool_errors", 0) for t in trajectories) / n
    endings = Counter(t.info.get("ended_by", "done") for t in trajectories)
    metrics.update({f"episode/ended_by_{e}": endings[e] / n for e in ENDINGS})
    components = [t.info.get("components", {}) for t in trajectories]
    for name in sorted({name for c in components for name in c}):
        metrics[f"reward/{name}"] = sum(c.get(name, 0.0) for c in components) / len(trajectories)
    metrics.update(domain_metrics(trajectories))
    return metrics


def domain_metrics(trajectories: list[Trajectory], prefix: str = "") -> dict[str, float]:
    """Accuracy and reward per problem domain (`{prefix}domain/<d>/...`), where there are several
    (a mix of tasks, a JSONL task of several files)."""
    domains: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        domains.setdefault(t.problem.domain, []).append(t)
    if len(domains) < 2:
        return {}
    metrics = {}
    for domain, group in sorted(domains.items()):
        metrics[f"{prefix}domain/{domain}/accuracy"] = sum(t.correct for t in group) / len(group)
        metrics[f"{prefix}domain/{domain}/reward"] = sum(t.reward for t in group) / len(group)
    return metrics


def staleness_metrics(trajectories: list[Trajectory], version: int) -> dict[str, float]:
    """How many updates old the weights that sampled each trajectory's oldest token were, and
    the share of trajectories written by more than one version (partial rollouts)."""
    sampled = [{v for v in t.versions if v >= 0} for t in trajectories if t.num_generated]
    if not sampled:
        return {}
    stale = [version - min(versions) for versions in sampled]
    return {
        "async/staleness_mean": sum(stale) / len(stale),
        "async/staleness_max": max(stale),
        "async/mixed_versions": sum(len(versions) > 1 for versions in sampled) / len(sampled),
    }


def sample_records(
    step: int,
    trajectories: list[Trajectory],
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    input_ids: torch.Tensor,
    decode: Callable[[list[int]], str],
) -> list[dict]:
    """One JSON-ready record per trajectory for samples.jsonl. `advantages` and `loss_mask`
    [n, T-1] are the trajectories' rows (position j predicts token j + 1 of `input_ids` [n, T]);
    `advantage` is the mean over the sample's policy tokens, and `tokens` lists every token from
    its first reply on as [text, advantage], the advantage None where the policy did not write
    it (an environment's observation)."""
    tokens = loss_mask.sum(-1).clamp(min=1)
    mean_advantage = ((advantages * loss_mask).sum(-1) / tokens).tolist()
    records = []
    for row, (t, advantage) in enumerate(zip(trajectories, mean_advantage)):
        mask, ids, values = loss_mask[row].tolist(), input_ids[row, 1:].tolist(), advantages[row]
        end = len(t.token_ids) - 1
        first = mask.index(1.0) if 1.0 in mask[:end] else end
        shown = [
            [decode([ids[j]]), round(float(values[j]), 4) if mask[j] else None]
            for j in range(first, end)
        ]
        records.append({
            "step": step,
            "group": t.group_id,
            "problem": t.problem.id,
            "prompt": t.problem.messages(),
            "response": t.response_text,
            "reward": t.reward,
            "correct": t.correct,
            "status": t.status,
            "finish_reason": t.finish_reason,
            "generated_tokens": t.num_generated,
            "advantage": advantage,
            "tokens": shown,
        })  # fmt: skip
    return records
