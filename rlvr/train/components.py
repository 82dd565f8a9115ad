"""Resolve every name in a config to a component (task, rewards, estimator, loss, KL, methods)
before any work, so mistakes fail fast."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from pydantic import BaseModel

from rlvr.algos.advantages import ADVANTAGES, AdvantageFn
from rlvr.algos.kl import KL_ESTIMATORS, KLFn
from rlvr.algos.losses import AGGREGATIONS, LOSSES
from rlvr.config import Config, ConfigError
from rlvr.distributed.ray_rollout import INSTALL as RAY_INSTALL
from rlvr.models.loading import ModelNotFoundError
from rlvr.registry import bind_params, fn_params, lookup, validate_params
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
    "old_normaliser",
    "ref_normaliser",
    "ref_logprobs",
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


def build_scoring(cfg: Config, task: Task) -> tuple[RewardFn | None, RewardFn | None]:
    """The run's reward (task.rewards combined, else the verifier) and the task's verifier,
    each under the reward timeout; None for a task that scores itself in its own env."""
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
    return reward, verifier


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
    advantage, loss, minimum = build_algorithm(cfg)  # their settings fail before any work
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
    reward, verifier = build_scoring(cfg, task)
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
    kl = (
        lookup(KL_ESTIMATORS, cfg.algo.kl_estimator, "algo.kl_estimator")
        if cfg.algo.kl_coef > 0 or methods.uses_kl()
        else None
    )
    return Components(task, reward, verifier, advantage, loss, kl, requires, minimum, methods)


def build_algorithm(cfg: Config) -> tuple[AdvantageFn, Callable, int]:
    """The estimator and the loss with their settings bound, and the smallest group the
    estimator compares within; refuses a run whose groups are smaller, or whose estimator and
    loss do not go together."""
    advantage, advantage_params = build_advantage(cfg)
    loss, loss_params = build_loss(cfg)
    check_q_targets(cfg, advantage, loss, advantage_params, loss_params)
    lookup(AGGREGATIONS, cfg.algo.loss_agg, "algo.loss_agg")
    minimum = getattr(advantage, "min_group_size", 1)
    minimum = minimum(advantage_params) if callable(minimum) else minimum  # may read its settings
    if cfg.rollout.group_size < minimum:
        raise ConfigError(
            f"rollout.group_size = {cfg.rollout.group_size}: algo.advantage = '{cfg.algo.advantage}' "
            f"compares completions of the same prompt, so it needs group_size >= {minimum}. "
            f"Fix: rollout.group_size={max(8, minimum)} (and keep rollout.batch_size a multiple of "
            "it)."
        )
    return advantage, loss, minimum


def build_advantage(cfg: Config) -> tuple[AdvantageFn, BaseModel | None]:
    """The estimator of algo.advantage with algo.advantage_params validated against its Params
    and bound (and bound to its critic targets, which read the same settings), and those
    params (None for an estimator without Params)."""
    name = cfg.algo.advantage
    fn = lookup(ADVANTAGES, name, "algo.advantage", group="rlvr.advantages")
    key = "algo.advantage_params"
    params = fn_params(fn, cfg.algo.advantage_params, key, f"advantage '{name}'")
    if params is None:
        return fn, None
    bound = bind_params(fn, params)
    targets = getattr(fn, "critic_targets", None)
    if targets is not None:  # the critic's targets read the same settings (e.g. lam_mode)
        bound.critic_targets = bind_params(targets, params)
    return bound, params


def build_loss(cfg: Config) -> tuple[Callable, BaseModel | None]:
    """The loss of algo.loss with algo.loss_params validated against its Params and bound, and
    those params (None for a loss without Params)."""
    name = cfg.algo.loss
    fn = lookup(LOSSES, name, "algo.loss", group="rlvr.losses")
    params = fn_params(fn, cfg.algo.loss_params, "algo.loss_params", f"loss '{name}'")
    return (fn if params is None else bind_params(fn, params)), params


def check_q_targets(
    cfg: Config,
    advantage: Callable,
    loss: Callable,
    advantage_params: BaseModel | None,
    loss_params: BaseModel | None,
) -> None:
    """A loss that regresses on Bellman targets comes with the estimator that makes them, and
    the two agree on every setting both declare (soft Q-learning's beta): each reads Q off the
    logits, and targets read with another beta than the loss's Q would not be its targets."""
    a = cfg.algo
    if getattr(loss, "q_targets", False) != getattr(advantage, "q_targets", False):
        raise ConfigError(
            f"algo.loss = '{a.loss}' with algo.advantage = '{a.advantage}': soft "
            "Q-learning's loss regresses on Bellman targets, which only its estimator makes. "
            "Fix: algo.loss=soft_q with algo.advantage=soft_bellman, or neither."
        )
    if not getattr(loss, "q_targets", False) or advantage_params is None or loss_params is None:
        return
    shared = sorted(set(type(advantage_params).model_fields) & set(type(loss_params).model_fields))
    for key in shared:
        targets_value, loss_value = getattr(advantage_params, key), getattr(loss_params, key)
        if targets_value != loss_value:
            raise ConfigError(
                f"algo.advantage_params.{key} = {targets_value} but algo.loss_params.{key} = "
                f"{loss_value}: "
                f"algo.advantage = '{a.advantage}' makes the targets that algo.loss = "
                f"'{a.loss}' regresses on, and both read Q off the logits with {key}. Fix: set "
                f"algo.advantage_params.{key} and algo.loss_params.{key} to the same value."
            )
