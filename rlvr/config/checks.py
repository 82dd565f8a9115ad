"""Checks across sections, run on every Config after its fields validate: settings that each
make sense alone but not together. Each raises ValueError (pydantic reports it) naming the fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rlvr.config.base import refuse_clashes

if TYPE_CHECKING:
    from rlvr.config.root import Config


def check_debate(cfg: Config) -> None:
    """A debate needs a critic, and the counterfactual advantage is the critic's."""
    if cfg.debate.rounds == 1:
        raise ValueError(
            "debate.rounds = 1 is the generator alone; fix: 0 for an ordinary run, or 2 or "
            "more for a generator and a critic"
        )
    if cfg.algo.advantage == "counterfactual" and cfg.debate.rounds < 2:
        raise ValueError(
            "algo.advantage = 'counterfactual' is the baseline of a debate's critic (the "
            "mean reward of the generator answers it was shown); fix: set debate.rounds = 2 "
            "(the critic gets it by default), or use 'remax' for a greedy-rollout baseline"
        )


def check_batch_shape(cfg: Config) -> None:
    """The batch splits into whole groups, whole minibatches and whole micro-batches."""
    r, a, t = cfg.rollout, cfg.algo, cfg.train
    if r.batch_size % r.group_size:
        raise ValueError(
            f"rollout.batch_size = {r.batch_size} is not divisible by rollout.group_size = "
            f"{r.group_size}; fix: make batch_size a multiple of group_size, e.g. "
            f"rollout.batch_size={max(1, r.batch_size // r.group_size) * r.group_size}"
        )
    if r.batch_size % a.minibatches:
        raise ValueError(
            f"algo.minibatches = {a.minibatches} does not divide rollout.batch_size = "
            f"{r.batch_size}; fix: choose a divisor of the batch size"
        )
    minibatch = r.batch_size // a.minibatches
    if minibatch % t.micro_batch_size and t.micro_batch_size < minibatch:
        raise ValueError(
            f"train.micro_batch_size = {t.micro_batch_size} does not divide the minibatch of "
            f"{minibatch} sequences (rollout.batch_size / algo.minibatches); fix: choose a divisor"
        )


def check_staleness_workers(cfg: Config) -> None:
    """Sampling ahead of training needs rollout workers of their own (Ray)."""
    r = cfg.rollout
    if r.max_staleness and cfg.distributed.backend != "ray":
        raise ValueError(
            f"rollout.max_staleness = {r.max_staleness} samples while the policy trains, "
            "which needs rollout workers of their own; fix: distributed.backend=ray (or "
            "rollout.max_staleness=0)"
        )


def check_fsdp(cfg: Config) -> None:
    """FSDP shards the training state over two or more Ray trainer ranks."""
    d = cfg.distributed
    if d.trainer_sharding == "fsdp" and (d.backend != "ray" or d.trainer_ranks < 2):
        raise ValueError(
            "distributed.trainer_sharding = 'fsdp' shards the training state over trainer "
            f"ranks, but this run has {d.trainer_ranks if d.backend == 'ray' else 1}; fix: "
            "distributed.backend=ray and distributed.trainer_ranks=2 or more (or "
            "distributed.trainer_sharding=replicate)"
        )


def check_rspo_explorer(cfg: Config) -> None:
    """RSPO pairs one policy with its explorer."""
    r = cfg.rollout
    if cfg.algo.rspo_explorer and (cfg.cohort.members or cfg.debate.rounds or r.replay):
        raise ValueError(
            "algo.rspo_explorer pairs one policy with its explorer; a cohort, a debate or "
            "rollout.replay trains otherwise; fix: turn those off (or algo.rspo_explorer=false)"
        )


def check_replay(cfg: Config) -> None:
    """Logged replies carry no sampling logprobs and come from one log, in this process."""
    r, a = cfg.rollout, cfg.algo
    if not r.replay:
        return
    others = {
        f"algo.tis={a.tis}": a.tis != "off",
        "algo.loss=dis": a.loss == "dis",
        "algo.kl_in_reward": a.kl_in_reward and a.kl_coef > 0,
        "distributed.backend=ray": cfg.distributed.backend == "ray",
        "rollout.tree_width": bool(r.tree_width),
        "rollout.partial_tokens": bool(r.partial_tokens),
        "algo.dynamic_sampling": bool(a.dynamic_sampling),
        "debate.rounds": bool(cfg.debate.rounds),
        "cohort.members": bool(cfg.cohort.members),
    }
    refuse_clashes(
        others,
        "rollout.replay trains on logged single-turn replies, whose sampling logprobs are "
        "unknown, in this process",
        "needs them sampled live or weighted by them",
        "rollout.replay=''",
    )


def check_staleness_weights(cfg: Config) -> None:
    """Samples of older weights train through an importance weight to the engine that sampled
    them: the decoupled objective (algo.tis), or the `dis` loss, whose ratio is that weight."""
    r, a = cfg.rollout, cfg.algo
    if a.loss == "dis" and a.tis != "off":
        raise ValueError(
            f"algo.loss = 'dis' weighs each token by pi / pi_behaviour already, so algo.tis = "
            f"'{a.tis}' would weigh it twice; fix: algo.tis=off (dis corrects stale samples too)"
        )
    if r.max_staleness and a.tis == "off" and a.loss != "dis":
        raise ValueError(
            f"rollout.max_staleness = {r.max_staleness} trains on samples of older weights, "
            "which needs the decoupled objective; fix: algo.tis=token (or sequence), or "
            "algo.loss=dis"
        )


def check_partial_tokens(cfg: Config) -> None:
    """Partial rollouts carry groups over to later steps and generate in segments."""
    r = cfg.rollout
    if r.partial_tokens and not r.max_staleness:
        raise ValueError(
            "rollout.partial_tokens keeps unfinished groups for a later step, which needs "
            "batches in flight beyond this one; fix: rollout.max_staleness=1 or more (or "
            "rollout.partial_tokens=0)"
        )
    if r.partial_tokens and (r.stop or r.tree_width):
        raise ValueError(
            "rollout.partial_tokens generates in segments, which neither a stop string that "
            "spans two segments nor a tree rollout's branching survives; fix: drop "
            "rollout.stop and rollout.tree_width, or set rollout.partial_tokens=0"
        )


def check_staleness_sampling(cfg: Config) -> None:
    """Prompts sampled ahead would be reordered by dynamic sampling's extra rounds."""
    if cfg.rollout.max_staleness and cfg.algo.dynamic_sampling:
        raise ValueError(
            "rollout.max_staleness > 0 samples future steps' prompts ahead, which "
            "algo.dynamic_sampling's extra rounds would reorder; fix: turn one of them off"
        )


# In the order they run: the first that fails raises, so a config with several clashes is
# told the same one first as before they were split.
CHECKS: list[Callable[[Config], None]] = [
    check_debate,
    check_batch_shape,
    check_staleness_workers,
    check_fsdp,
    check_rspo_explorer,
    check_replay,
    check_staleness_weights,
    check_partial_tokens,
    check_staleness_sampling,
]
