"""Resolve every name in a config to a component before any work, so mistakes fail fast."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from rlvr.algos.advantages import ADVANTAGES, AdvantageFn
from rlvr.algos.kl import KL_ESTIMATORS, KLFn
from rlvr.algos.losses import AGGREGATIONS, LOSSES
from rlvr.config import Config, ConfigError
from rlvr.distributed.backends import BACKENDS
from rlvr.distributed.base import RolloutSource, UpdateGroup
from rlvr.distributed.ray_rollout import INSTALL as RAY_INSTALL
from rlvr.models.loading import ModelNotFoundError
from rlvr.registry import lookup, validate_params
from rlvr.rewards import REWARDS, by_domain, gated, score_safely, weighted
from rlvr.rewards.sandbox import SandboxUnavailableError
from rlvr.rollout import ENGINES
from rlvr.rollout.vllm_engine import INSTALL as VLLM_INSTALL
from rlvr.tasks import TASKS
from rlvr.tasks.base import Task
from rlvr.tasks.paraphrase import Paraphrased
from rlvr.train.hooks import Methods
from rlvr.types import Problem, Score

RewardFn = Callable[[Problem, str], Score]

# Optional AdvInputs fields the trainer fills; an estimator lists what it needs in `fn.requires`.
PRODUCED_FIELDS = {
    "token_rewards",
    "baseline_rewards",
    "values",
    "turn_rewards",
    "turn_ids",
    "segment_advantages",
    "segment_weights",
    "reward_mean",
    "old_logprobs",
    "sum_pi_squared",
    "reward_components",
    "reward_weights",
    "soft_values",
    "soft_q_values",
    "target_ids",
}


@dataclass
class Components:
    task: Task
    reward: RewardFn | None  # None: the task's own env scores episodes
    verifier: RewardFn | None
    advantage: AdvantageFn
    loss: Callable
    kl: KLFn | None
    requires: frozenset[str] = frozenset()  # optional AdvInputs fields the estimator reads
    min_group_size: int = 1  # smallest group the estimator can compare within
    methods: Methods = field(default_factory=Methods)  # the research methods of cfg.methods


def build_task(cfg: Config) -> Task:
    task_cls = lookup(TASKS, cfg.task.name, "task.name", group="rlvr.tasks")
    params = validate_params(
        task_cls.Params, cfg.task.params, "task", extra_known=type(cfg.task).model_fields
    )
    try:
        task = task_cls(params, seed=cfg.train.seed, eval_size=cfg.task.eval_size)
        return Paraphrased(task, cfg.task.name) if cfg.task.paraphrase else task
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(f"task '{cfg.task.name}': {e}") from None


def build_rewards(cfg: Config, verifiers: list[str]) -> dict[str, RewardFn]:
    """The task's verifiers (none for a task that scores itself as an env; one per domain for a
    mix) and each task.rewards component by name; a reward class is built from its
    `task.reward_params` entry (where a code sandbox checks its isolation, so a run without one
    never starts)."""
    where = {n: f"task.rewards.{n}" for n in cfg.task.rewards}
    where = {**{v: "task verifier" for v in verifiers}, **where}
    names, settings = list(where), cfg.task.reward_params
    for name in settings:
        if name not in names:
            raise ConfigError(
                f"task.reward_params.{name}: '{name}' is not a reward of this run (the task's "
                f"verifier or a key of task.rewards: {', '.join(names)}). Fix: remove it."
            )
    rewards = {}
    for name in names:
        entry = lookup(REWARDS, name, where[name], group="rlvr.rewards")
        if not isinstance(entry, type):
            if name in settings:
                raise ConfigError(
                    f"task.reward_params.{name}: reward '{name}' takes no settings. Fix: remove it."
                )
            rewards[name] = entry
            continue
        params = validate_params(entry.Params, settings.get(name, {}), f"task.reward_params.{name}")
        try:
            rewards[name] = entry(params)
        except (SandboxUnavailableError, ModelNotFoundError, ValueError, OSError) as e:
            raise ConfigError(f"reward '{name}' cannot start: {e}") from None
    return rewards


def build_components(cfg: Config) -> Components:
    lookup(ENGINES, cfg.rollout.engine, "rollout.engine", group="rlvr.engines")  # before any work
    if cfg.rollout.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            f"rollout.engine = 'vllm', but vLLM is not installed. Fix: {VLLM_INSTALL}, or "
            "rollout.engine=hf."
        )
    if cfg.distributed.backend == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(
            f"distributed.backend = 'ray', but Ray is not installed. Fix: {RAY_INSTALL}, or "
            "distributed.backend=local."
        )
    task = build_task(cfg)
    if task.verifier is None and cfg.task.rewards:
        raise ConfigError(
            f"task '{cfg.task.name}' scores its episodes in its own environment, so "
            "task.rewards does not apply to it. Fix: remove task.rewards."
        )
    if "solution_prefix" in cfg.task.rewards and "solution" not in task.train_problem(0).metadata:
        raise ConfigError(
            f"task.rewards: solution_prefix scores replies against a worked solution, and task "
            f"'{cfg.task.name}' gives its problems none. Fix: remove solution_prefix, or use the "
            "arithmetic task or a jsonl task with task.solution_field"
        )
    routes = getattr(task, "verifiers", None)  # a mix: {domain: its task's verifier}
    if routes and cfg.task.rewards:
        raise ConfigError(
            f"task '{cfg.task.name}' scores each problem with its own domain's verifier, and "
            "task.rewards does not combine with that yet. Fix: remove task.rewards."
        )
    if routes:
        rewards = build_rewards(cfg, sorted(set(routes.values())))
        rewards[task.verifier] = by_domain({d: rewards[name] for d, name in routes.items()})
    else:
        rewards = build_rewards(cfg, [] if task.verifier is None else [task.verifier])
    timeout = cfg.task.reward_timeout
    verifier = (
        None
        if task.verifier is None
        else partial(score_safely, rewards[task.verifier], timeout=timeout)
    )
    if cfg.task.rewards:
        combine = gated if cfg.task.reward_mode == "gated" else weighted
        reward = partial(score_safely, combine(cfg.task.rewards, rewards), timeout=timeout)
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
    # Imported here: a method may use this module's runners (River's screen), so methods sit above it.
    from rlvr.methods import METHODS, build_methods

    methods = build_methods(cfg, task)
    missing = requires - PRODUCED_FIELDS - methods.provides()
    if missing:
        owners = [f"methods.{n}={{}}" for n, m in METHODS.items() if missing & m.provides]
        raise ConfigError(
            f"algo.advantage = '{cfg.algo.advantage}' needs {', '.join(sorted(missing))}, which "
            + (f"a method fills. Fix: add {' or '.join(owners)}" if owners else
               "neither the trainer nor a method fills. Fix: choose another estimator.")
        )  # fmt: skip
    trees = "segment_advantages" in requires
    if trees != (cfg.rollout.tree_width > 0):
        raise ConfigError(
            f"algo.advantage = '{cfg.algo.advantage}' with rollout.tree_width = "
            f"{cfg.rollout.tree_width}: the tree estimator and tree rollouts go together. Fix: "
            + (
                "rollout.tree_width=2."
                if trees
                else "algo.advantage=tree (or rollout.tree_width=0 for independent samples)."
            )
        )
    if cfg.rollout.replay and hasattr(task, "make_env"):
        raise ConfigError(
            f"rollout.replay answers each prompt with one logged reply, but '{cfg.task.name}' "
            "plays episodes of several turns in its own env. Fix: a single-turn task, or "
            "rollout.replay='' to sample live."
        )
    if cfg.rollout.tree_width == 1:
        raise ConfigError("rollout.tree_width = 1 cannot branch. Fix: 2 or more, or 0 for none.")
    loss = lookup(LOSSES, cfg.algo.loss, "algo.loss", group="rlvr.losses")
    if getattr(loss, "q_targets", False) != getattr(advantage, "q_targets", False):
        raise ConfigError(
            f"algo.loss = '{cfg.algo.loss}' with algo.advantage = '{cfg.algo.advantage}': soft "
            "Q-learning's loss regresses on Bellman targets, which only its estimator makes. "
            "Fix: algo.loss=soft_q with algo.advantage=soft_bellman, or neither."
        )
    lookup(AGGREGATIONS, cfg.algo.loss_agg, "algo.loss_agg")
    kl = (
        lookup(KL_ESTIMATORS, cfg.algo.kl_estimator, "algo.kl_estimator")
        if cfg.algo.kl_coef > 0 or methods.uses_kl()
        else None
    )
    return Components(task, reward, verifier, advantage, loss, kl, requires, minimum, methods)


def build_rollout_source(
    cfg: Config, model, tokenizer, components: Components, model_path: str
) -> RolloutSource:
    """Where samples come from: the rollout source of distributed.backend (BACKENDS)."""
    backend = lookup(BACKENDS, cfg.distributed.backend, "distributed.backend")
    return backend.source(cfg, model, tokenizer, components, model_path)


def build_update_group(
    cfg: Config, tokenizer, model_path: str, source: RolloutSource, model
) -> UpdateGroup:
    """Who runs the policy update of `model` and holds its optimizer, by distributed.backend."""
    backend = lookup(BACKENDS, cfg.distributed.backend, "distributed.backend")
    return backend.update_group(cfg, tokenizer, model_path, source, model)
