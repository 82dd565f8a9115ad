"""W2SPO's branch injection (arXiv 2607.16205): a weaker model writes a few tokens in the middle of
some of the policy's replies, the policy continues, and only the inserted tokens are trained."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.rollout.engine import Completion, Engine, SamplingParams, is_greedy
from rlvr.types import Trajectory


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
        room = min(self.insert_tokens, params.max_new_tokens)
        inserts = self.weak.generate(
            stems, replace(params, max_new_tokens=room), [draws[i].getrandbits(63) for i in chosen]
        )
        tails = self._continue(chosen, stems, inserts, cut, params, draws)
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

    def _continue(self, chosen, stems, inserts, cut, params, draws) -> list[Completion]:
        """The policy's continuation after each insert, in the budget the reply has left (none
        after an insert that ended the reply or used the budget up)."""
        tails = [Completion([], [], "length") for _ in chosen]
        pending = [
            k
            for k, (i, insert) in enumerate(zip(chosen, inserts))
            if insert.finish_reason == "length"
            and params.max_new_tokens - cut[i] - len(insert.token_ids) > 0
        ]
        # One call per remaining budget: a budget is a call's SamplingParams.
        by_budget: dict[int, list[int]] = {}
        for k in pending:
            budget = params.max_new_tokens - cut[chosen[k]] - len(inserts[k].token_ids)
            by_budget.setdefault(budget, []).append(k)
        for budget, ks in by_budget.items():
            out = self.policy.generate(
                [stems[k] + inserts[k].token_ids for k in ks],
                replace(params, max_new_tokens=budget),
                [draws[chosen[k]].getrandbits(63) for k in ks],
            )
            for k, tail in zip(ks, out):
                tails[k] = tail
        return tails


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
