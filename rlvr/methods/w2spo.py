"""W2SPO (arXiv 2607.16205): a weaker model writes a few tokens into some of the policy's sampled
replies, the policy continues, and only the inserted span trains, importance-weighted by
pi / pi_weak."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from pydantic import Field
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import ConfigError
from rlvr.models.loading import load_frozen
from rlvr.rollout.engine import Completion, Engine, SamplingParams, is_greedy
from rlvr.rollout.hf_engine import HFEngine
from rlvr.train.hooks import Method, MethodParams, Step
from rlvr.types import Trajectory

KEY = "methods.w2spo"


class Params(MethodParams):
    model: str = Field(
        description="A weaker model (hub id or path, sharing the policy's tokenizer) that writes "
        "`tokens` tokens into `share` of the sampled replies at a uniformly drawn position; the "
        "policy continues, and those replies train on the inserted span alone, weighted by "
        "algo.tis's capped pi / pi_weak.",
    )
    tokens: int = Field(8, gt=0, description="Tokens in each weak branch.")
    share: float = Field(
        0.5, gt=0, le=1, description="Share of sampled replies that get a weak branch."
    )


class W2SPO(Method):
    """W2SPO (arXiv 2607.16205): a weaker model's short branches written into training replies,
    which train on the inserted span alone (eval samples the policy alone)."""

    Params = Params

    @classmethod
    def check(cls, params: Params, cfg, task) -> None:
        r = cfg.rollout
        if cfg.algo.tis == "off":
            raise ConfigError(
                f"{KEY} writes weak tokens the update trains on, which needs their importance "
                "weights pi / pi_weak; fix: algo.tis=token"
            )
        clashes = {
            "distributed.backend=ray": cfg.distributed.backend == "ray",
            "rollout.tree_width": bool(r.tree_width),
            "rollout.partial_tokens": bool(r.partial_tokens),
            "rollout.replay": bool(r.replay),
        }
        if on := [name for name, clash in clashes.items() if clash]:
            raise ConfigError(
                f"{KEY} branches the replies of the in-process rollout, not Ray workers', tree "
                f"rollouts', partial rollouts' or logged ones; fix: drop {', '.join(on)} (or "
                f"{KEY}=null)"
            )

    def engine(self, engine, model, tokenizer, training: bool):
        if not training:  # eval measures the policy alone
            return engine
        p = self.params
        weak = load_frozen(p.model, f"{KEY}.model", tokenizer, model.device)
        weak_engine = HFEngine(weak, tokenizer, self.cfg.rollout.max_batch_size)
        return BranchingEngine(engine, weak_engine, tokenizer, p.tokens, p.share)

    def after_sample(self, step: Step) -> None:
        step.metrics.update(branch_metrics(step.trajectories))


class BranchingEngine:
    """The policy's engine, with a `share` of its sampled completions branched: at a position
    drawn uniformly over the policy's own reply, `weak` samples `insert_tokens` tokens, and the
    policy continues from there within the same token budget. A branched completion carries the
    weak model's logprobs on the inserted span (so the update's truncated importance weights
    are pi / pi_weak there) and trains on that span alone. Every draw comes from the sample's
    seed, so a resumed run branches the same samples at the same places. Greedy calls (eval)
    are never branched."""

    def __init__(
        self,
        policy: Engine,
        weak: Engine,
        tokenizer: PreTrainedTokenizerBase,
        insert_tokens: int,
        share: float,
    ):
        self.policy, self.weak, self.tokenizer = policy, weak, tokenizer
        self.insert_tokens, self.share = insert_tokens, share

    def load_weights(self, model: PreTrainedModel) -> None:
        self.policy.load_weights(model)  # the weak model stays as it was loaded

    def release_memory(self) -> None:
        self.policy.release_memory()
        self.weak.release_memory()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        completions = self.policy.generate(prompts, params, seeds)
        if is_greedy(prompts, params, seeds):
            return completions
        draws = [random.Random(seed) for seed in seeds]
        chosen = [
            i
            for i, (c, rng) in enumerate(zip(completions, draws))
            if rng.random() < self.share and len(c.token_ids) > 1
        ]
        if not chosen:
            return completions
        # Where each branch starts: after 0 .. len - 2 of the policy's tokens, so one is replaced.
        cut = {i: draws[i].randrange(len(completions[i].token_ids) - 1) for i in chosen}
        stems = [list(prompts[i]) + completions[i].token_ids[: cut[i]] for i in chosen]
        insert_seeds = [draws[i].getrandbits(63) for i in chosen]
        tail_seeds = [draws[i].getrandbits(63) for i in chosen]
        rooms = [min(self.insert_tokens, params.max_new_tokens - cut[i]) for i in chosen]
        inserts = generate_within(self.weak, stems, rooms, params, insert_seeds)
        # The policy continues after an insert that used its room, in what the reply has left.
        budgets = [
            params.max_new_tokens - cut[i] - len(insert.token_ids)
            if insert.finish_reason == "length"
            else 0
            for i, insert in zip(chosen, inserts)
        ]
        contexts = [stem + insert.token_ids for stem, insert in zip(stems, inserts)]
        tails = generate_within(self.policy, contexts, budgets, params, tail_seeds)
        for i, insert, tail in zip(chosen, inserts, tails):
            head = completions[i]
            ids = head.token_ids[: cut[i]] + insert.token_ids + tail.token_ids
            completions[i] = Completion(
                token_ids=ids,
                logprobs=head.logprobs[: cut[i]] + insert.logprobs + tail.logprobs,
                finish_reason=tail.finish_reason if tail.token_ids else insert.finish_reason,
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                trained=[0] * cut[i] + [1] * len(insert.token_ids) + [0] * len(tail.token_ids),
            )
        return completions


def generate_within(
    engine: Engine,
    contexts: list[list[int]],
    budgets: list[int],
    params: SamplingParams,
    seeds: list[int],
) -> list[Completion]:
    """Each context continued by `engine` for at most its own budget of tokens (one call per
    distinct budget, since a budget is a call's SamplingParams); a budget of 0 continues nothing."""
    out = [Completion([], [], "length") for _ in contexts]
    by_budget: dict[int, list[int]] = {}
    for k, budget in enumerate(budgets):
        if budget > 0:
            by_budget.setdefault(budget, []).append(k)
    for budget, ks in by_budget.items():
        params_k = replace(params, max_new_tokens=budget)
        done = engine.generate([contexts[k] for k in ks], params_k, [seeds[k] for k in ks])
        for k, completion in zip(ks, done):
            out[k] = completion
    return out


def branch_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """The share of rollouts that carry a weak branch, the tokens a branch trains (its span),
    and the accuracy of branched and unbranched rollouts."""
    branched = [t for t in trajectories if t.info.get("branched")]
    plain = [t for t in trajectories if not t.info.get("branched")]
    metrics = {"branch/share": len(branched) / max(len(trajectories), 1)}
    if branched:
        metrics["branch/accuracy"] = sum(t.correct for t in branched) / len(branched)
        metrics["branch/inserted_tokens"] = sum(sum(t.loss_mask) for t in branched) / len(branched)
    if plain:
        metrics["branch/unbranched_accuracy"] = sum(t.correct for t in plain) / len(plain)
    return metrics
