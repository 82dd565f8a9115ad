"""The rollout wiring of a config: the engine of rollout.engine, the task's env, the sampling
params, and the runner (independent samples, a tree, or partial segments) that drives them."""

from __future__ import annotations

from collections.abc import Callable

from rlvr.config import Config
from rlvr.envs.base import Env
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.registry import lookup
from rlvr.rollout import ENGINES, Engine, EpisodeRunner, HFEngine, SamplingParams
from rlvr.rollout.partial import PartialRunner
from rlvr.rollout.tree import TreeRunner, entropy_scorer


def env_factory(components) -> Callable[[], Env]:
    """The task's own env (multi-turn games, tool use) when it has one, else a SingleTurnEnv."""
    task, reward, verifier = components.task, components.reward, components.verifier
    if hasattr(task, "make_env"):
        return lambda: task.make_env(reward, verifier)
    return lambda: SingleTurnEnv(reward, verifier)


def build_engine(cfg: Config, model, tokenizer, model_path: str) -> Engine:
    """The rollout engine of rollout.engine: a name in ENGINES (`rlvr list engines`), an entry
    point of group rlvr.engines or a `module:attr` builder, called as (cfg, model, tokenizer,
    model_path); a method may wrap it (`Method.engine`)."""
    build = lookup(ENGINES, cfg.rollout.engine, "rollout.engine", group="rlvr.engines")
    return build(cfg, model, tokenizer, model_path)


def sampling_params(cfg: Config) -> SamplingParams:
    r = cfg.rollout
    return SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k, tuple(r.stop))


def make_runner(
    cfg: Config,
    model,
    tokenizer,
    components,
    trees: bool = True,
    engine: Engine | None = None,
) -> EpisodeRunner:
    """`engine` (default: the embedded one) driving the task's env with the configured sampling
    and budgets; a TreeRunner when rollout.tree_width is set and `trees` (eval always samples
    independently: a tree's leaves are correlated, which would bias pass@k)."""
    r = cfg.rollout
    params = sampling_params(cfg)
    common = dict(
        engine=engine or HFEngine(model, tokenizer, r.max_batch_size),
        tokenizer=tokenizer,
        make_env=env_factory(components),
        params=params,
        max_turns=r.max_turns,
        chunk_size=r.max_batch_size,
        workers=r.reward_workers,
        max_total_tokens=r.max_total_tokens,
    )
    if trees and r.partial_tokens:  # only Ray rollout workers build one (rollout.max_staleness)
        return PartialRunner(**common, segment_tokens=r.partial_tokens)
    if not (trees and r.tree_width):
        return EpisodeRunner(**common)
    scorer = entropy_scorer(model, params) if r.tree_branch_score == "entropy" else None
    return TreeRunner(
        **common, width=r.tree_width, depth=r.tree_depth, branch_at=r.tree_branch_at,
        scorer=scorer, min_segment_tokens=r.tree_min_segment_tokens,
    )  # fmt: skip
