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


def check_weight_samples(cfg: Config) -> None:
    """3PO samples every reply of the in-process rollout from a weight draw of the policy's
    own parameters, and trains on them through the sequence-level IS mask."""
    r, a = cfg.rollout, cfg.algo
    if not a.weight_samples:
        return
    if r.group_size % a.weight_samples:
        raise ValueError(
            f"algo.weight_samples = {a.weight_samples} splits each group's replies evenly "
            f"over its weight draws, but rollout.group_size = {r.group_size} is not a "
            "multiple of it; fix: choose a divisor of the group size"
        )
    if a.tis != "sequence_mask":
        raise ValueError(
            "algo.weight_samples trains on replies sampled from perturbed weights, which "
            "needs C3PO's sequence-level importance mask; fix: algo.tis=sequence_mask"
        )
    others = {
        "distributed.backend=ray": cfg.distributed.backend == "ray",
        "rollout.engine=vllm": r.engine != "hf",
        "rollout.tree_width": bool(r.tree_width),
        "rollout.branch_model": bool(r.branch_model),
        "rollout.dispatch_threads": r.dispatch_threads,
        "debate.rounds": bool(cfg.debate.rounds),
        "cohort.members": bool(cfg.cohort.members),
    }
    refuse_clashes(
        others,
        "algo.weight_samples perturbs the weights the in-process engine samples with, one "
        "policy at a time",
        "samples otherwise",
        "algo.weight_samples=0",
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
        "algo.teacher": bool(a.teacher),
        "distributed.backend=ray": cfg.distributed.backend == "ray",
        "rollout.tree_width": bool(r.tree_width),
        "rollout.branch_model": bool(r.branch_model),
        "rollout.dispatch_threads": r.dispatch_threads,
        "rollout.partial_tokens": bool(r.partial_tokens),
        "algo.weight_samples": bool(a.weight_samples),
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
    """Samples of older weights train through the decoupled objective (algo.tis)."""
    r = cfg.rollout
    if r.max_staleness and cfg.algo.tis == "off":
        raise ValueError(
            f"rollout.max_staleness = {r.max_staleness} trains on samples of older weights, "
            "which needs the decoupled objective; fix: algo.tis=token (or sequence)"
        )


def check_branch_model(cfg: Config) -> None:
    """W2SPO's weak branches need importance weights and the in-process, flat rollout."""
    r = cfg.rollout
    if r.branch_model and cfg.algo.tis == "off":
        raise ValueError(
            "rollout.branch_model writes weak tokens the update trains on, which needs their "
            "importance weights pi / pi_weak; fix: algo.tis=token"
        )
    if r.branch_model and (cfg.distributed.backend == "ray" or r.tree_width or r.partial_tokens):
        raise ValueError(
            "rollout.branch_model branches the replies of the in-process rollout, not of "
            "Ray workers, tree rollouts or partial rollouts; fix: distributed.backend=local, "
            "rollout.tree_width=0 and rollout.partial_tokens=0 (or no rollout.branch_model)"
        )


def check_parallel_threads(cfg: Config) -> None:
    """Parason's dispatched threads run in the in-process rollout, each reply scored whole."""
    r, a = cfg.rollout, cfg.algo
    if r.dispatch_threads and (
        cfg.distributed.backend == "ray" or r.tree_width or r.branch_model
        or a.teacher or a.domain_teachers or cfg.debate.rounds >= 2
    ):  # fmt: skip
        raise ValueError(
            "rollout.dispatch_threads runs Parason's threads in the in-process rollout, as "
            "single replies each scored whole; it does not combine with Ray workers, tree "
            "rollouts, W2SPO branches, teachers or a debate. Fix: drop those, or "
            "rollout.dispatch_threads=false"
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


def check_teacher(cfg: Config) -> None:
    """Direct-OPD: one kind of teacher, and its shaping keys only beside algo.teacher."""
    a = cfg.algo
    if a.domain_teachers and a.teacher:
        raise ValueError(
            "algo.domain_teachers distils each domain from its own teacher, and algo.teacher "
            "names one for every sample; fix: keep one of them"
        )
    if (a.teacher_top_k or a.teacher_kl_coefs) and not a.teacher:
        raise ValueError(
            "algo.teacher_top_k and algo.teacher_kl_coefs shape algo.teacher's implicit "
            "reward, but algo.teacher is not set; fix: set it (domain_teachers take neither), "
            "or drop them"
        )
    if a.teacher_kl_coefs and (
        len(a.teacher_kl_coefs) != 2 or min(a.teacher_kl_coefs) < 0 or a.kl_target
    ):
        raise ValueError(
            f"algo.teacher_kl_coefs = {a.teacher_kl_coefs}: it takes two coefficients, [when "
            "the batch's implicit reward is below 0, when at or above], each >= 0, and no "
            "algo.kl_target; fix: e.g. algo.teacher_kl_coefs=[0.0, 0.1]"
        )
    if a.teacher_ref and not a.teacher:
        raise ValueError(
            "algo.teacher_ref is the teacher before its RL run, but algo.teacher is not set; "
            "fix: algo.teacher=<the teacher after RL>, or drop algo.teacher_ref"
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
    check_weight_samples,
    check_rspo_explorer,
    check_replay,
    check_staleness_weights,
    check_branch_model,
    check_parallel_threads,
    check_partial_tokens,
    check_teacher,
    check_staleness_sampling,
]
