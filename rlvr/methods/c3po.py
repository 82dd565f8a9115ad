"""3PO / C3PO: explore in parameter space. Each group's replies are sampled over weight draws from
a diagonal Gaussian posterior around the trainable weights, and train through C3PO's
sequence-level importance mask; the posterior lives in rlvr/rollout/weight_noise.py."""

from __future__ import annotations

from pydantic import Field

from rlvr.config import ConfigError
from rlvr.rollout.weight_noise import WeightNoise
from rlvr.train.hooks import Method, MethodParams, Run

KEY = "methods.c3po"


class Params(MethodParams):
    weight_samples: int = Field(
        2,
        ge=1,
        description="Weight samples drawn each step from a diagonal Gaussian posterior around "
        "the trainable weights (the adapters under model.lora); each samples rollout.group_size "
        "/ weight_samples replies of every group, and advantages still pool the whole group. "
        "Needs algo.tis=sequence_mask.",
    )
    ess: float = Field(
        1e5,
        gt=0,
        description="The posterior's effective sample size lambda: sigma = 1 / sqrt(lambda * "
        "(h + floor)), h the optimizer's running mean of squared gradients.",
    )
    floor: float = Field(
        0.1,
        gt=0,
        description="The posterior's prior precision delta, which sets sigma where the squared "
        "gradients are small (1 / sqrt(lambda * delta) before the first update; 0.01 at the "
        "defaults).",
    )


class C3PO(Method):
    """3PO / C3PO (arXiv 2608.09805): each group's replies sampled over weight draws of a
    posterior around the policy, trained through the sequence-level importance mask."""

    Params = Params

    @classmethod
    def check(cls, params: Params, cfg, task) -> None:
        r, samples = cfg.rollout, params.weight_samples
        if r.group_size % samples:
            raise ConfigError(
                f"{KEY}.weight_samples = {samples} splits each group's replies evenly over its "
                f"weight draws, but rollout.group_size = {r.group_size} is not a multiple of "
                "it; fix: choose a divisor of the group size"
            )
        if cfg.algo.tis != "sequence_mask":
            raise ConfigError(
                f"{KEY} trains on replies sampled from perturbed weights, which needs C3PO's "
                "sequence-level importance mask; fix: algo.tis=sequence_mask"
            )
        clashes = {
            "distributed.backend=ray": cfg.distributed.backend == "ray",
            "rollout.engine=vllm": r.engine != "hf",
            "rollout.tree_width": bool(r.tree_width),
            "rollout.replay": bool(r.replay),
            "methods.w2spo": "w2spo" in cfg.methods,
            "debate.rounds": bool(cfg.debate.rounds),
            "cohort.members": bool(cfg.cohort.members),
        }
        if on := [name for name, clash in clashes.items() if clash]:
            raise ConfigError(
                f"{KEY} perturbs the weights the in-process engine samples with, one policy at "
                f"a time; {', '.join(on)} samples otherwise; fix: turn those off (or {KEY}=null)"
            )

    def setup(self, run: Run) -> None:
        p = self.params
        optimizer = run.updater.optimizer  # its second moments shape the posterior
        run.source.noise = WeightNoise(run.model, optimizer, p.weight_samples, p.ess, p.floor)
