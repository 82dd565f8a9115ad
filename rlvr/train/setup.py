"""Resolve every name in a config to a component before any work, so mistakes fail fast."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from pydantic import ValidationError

from rlvr.algos.advantages import ADVANTAGES, AdvantageFn
from rlvr.algos.kl import KL_ESTIMATORS, KLFn
from rlvr.algos.losses import AGGREGATIONS, LOSSES
from rlvr.config import Config, ConfigError, suggest
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.registry import lookup
from rlvr.rewards import REWARDS, gated, score_safely, weighted
from rlvr.rollout import EpisodeRunner, HFEngine, SamplingParams
from rlvr.tasks import TASKS
from rlvr.tasks.base import Task
from rlvr.types import Problem, Score

RewardFn = Callable[[Problem, str], Score]

# Optional AdvInputs fields the trainer fills; an estimator lists what it needs in `fn.requires`.
PRODUCED_FIELDS = {"token_rewards", "baseline_rewards", "values"}


@dataclass
class Components:
    task: Task
    reward: RewardFn
    verifier: RewardFn
    advantage: AdvantageFn
    loss: Callable
    kl: KLFn | None
    requires: frozenset[str] = frozenset()  # optional AdvInputs fields the estimator reads


def build_task(cfg: Config) -> Task:
    task_cls = lookup(TASKS, cfg.task.name, "task.name", group="rlvr.tasks")
    try:
        params = task_cls.Params.model_validate(cfg.task.params)
    except ValidationError as e:
        lines = []
        known = [
            f"task.{k}"
            for k in list(task_cls.Params.model_fields) + list(type(cfg.task).model_fields)
        ]
        for err in e.errors():
            key = "task." + ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                lines.append(
                    f"unknown key '{key}' for task '{cfg.task.name}'.{suggest(key, known)}"
                )
            else:
                value = cfg.task.params.get(str(err["loc"][0])) if err["loc"] else None
                lines.append(f"{key} = {value!r}: {err['msg']}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines)) from None
    try:
        return task_cls(params, seed=cfg.train.seed, eval_size=cfg.task.eval_size)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(f"task '{cfg.task.name}': {e}") from None


def build_components(cfg: Config) -> Components:
    task = build_task(cfg)
    verifier_fn = lookup(REWARDS, task.verifier, "task verifier", group="rlvr.rewards")
    verifier = partial(score_safely, verifier_fn)
    if cfg.task.rewards:
        resolved = {
            name: lookup(REWARDS, name, f"task.rewards.{name}", group="rlvr.rewards")
            for name in cfg.task.rewards
        }
        combine = gated if cfg.task.reward_mode == "gated" else weighted
        reward = partial(score_safely, combine(cfg.task.rewards, registry={**REWARDS, **resolved}))
    else:
        reward = verifier
    advantage = lookup(ADVANTAGES, cfg.algo.advantage, "algo.advantage", group="rlvr.advantages")
    minimum = getattr(advantage, "min_group_size", 1)
    minimum = minimum(cfg.algo) if callable(minimum) else minimum  # may depend on e.g. algo.pass_k
    if cfg.rollout.group_size < minimum:
        raise ConfigError(
            f"rollout.group_size = {cfg.rollout.group_size}: algo.advantage = '{cfg.algo.advantage}' "
            f"compares completions of the same prompt, so it needs group_size >= {minimum}. "
            f"Fix: rollout.group_size=8 (and keep rollout.batch_size a multiple of it)."
        )
    requires = frozenset(getattr(advantage, "requires", ()))
    missing = requires - PRODUCED_FIELDS
    if missing:
        raise ConfigError(
            f"algo.advantage = '{cfg.algo.advantage}' needs {', '.join(sorted(missing))}, which the "
            "trainer does not produce yet (critic values arrive with train/critic.py). "
            "Fix: choose another estimator."
        )
    loss = lookup(LOSSES, cfg.algo.loss, "algo.loss", group="rlvr.losses")
    lookup(AGGREGATIONS, cfg.algo.loss_agg, "algo.loss_agg")
    kl = (
        lookup(KL_ESTIMATORS, cfg.algo.kl_estimator, "algo.kl_estimator")
        if cfg.algo.kl_coef > 0
        else None
    )
    return Components(task, reward, verifier, advantage, loss, kl, requires)


def make_runner(cfg: Config, model, tokenizer, components: Components) -> EpisodeRunner:
    """The embedded engine driving the task's single-turn env with the configured sampling."""
    r = cfg.rollout
    return EpisodeRunner(
        HFEngine(model, tokenizer, r.max_batch_size),
        tokenizer,
        lambda: SingleTurnEnv(components.reward, components.verifier),
        SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k, tuple(r.stop)),
    )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
