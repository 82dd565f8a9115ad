"""W2SPO (arXiv 2607.16205): a weaker model writes a few tokens into some of the policy's sampled
replies, the policy continues, and only the inserted span trains, importance-weighted by
pi / pi_weak; the branching engine lives in rlvr/rollout/branching.py."""

from __future__ import annotations

from pydantic import Field

from rlvr.config import ConfigError
from rlvr.models.loading import load_frozen
from rlvr.rollout.branching import BranchingEngine, branch_metrics
from rlvr.rollout.hf_engine import HFEngine
from rlvr.train.hooks import Method, MethodParams, Step

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
    """Wraps the training engine in weak branches (eval samples the policy alone) and logs how
    branched and unbranched replies fare."""

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
