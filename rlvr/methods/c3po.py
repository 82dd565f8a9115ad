"""3PO / C3PO: explore in parameter space. The trainable weights train with IVON (ivon-opt), and
each step's replies are sampled over weight draws of its posterior N(m, 1 / (lambda (h + delta)))."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import torch
from pydantic import Field

from rlvr.config import ConfigError
from rlvr.models.lora import trainable_state_dict
from rlvr.rollout.engine import sample_seed
from rlvr.train.hooks import Method, MethodParams, Run
from rlvr.train.update import make_scheduler

KEY = "methods.c3po"
INSTALL = "pip install -c constraints.txt -e '.[ivon]'"
TRAINING_DRAW_STREAM = 8  # seeds the draws gradients are taken at apart from the rollouts' (7)


class Params(MethodParams):
    weight_samples: int = Field(
        2,
        ge=1,
        description="Weight samples drawn each step from IVON's posterior over the trainable "
        "weights (the adapters under model.lora); each samples rollout.group_size / "
        "weight_samples replies of every group, and advantages still pool the whole group. "
        "Needs algo.tis=sequence_mask.",
    )
    ess: float = Field(
        1e9,
        gt=0,
        description="IVON's effective sample size lambda: sigma = 1 / sqrt(lambda * (h + "
        "delta)), h IVON's diagonal Hessian estimate (the paper: 1e9-1e10).",
    )
    prior_precision: float = Field(
        1e-4,
        gt=0,
        description="IVON's weight decay delta, the prior's precision: it keeps sigma finite "
        "where h is 0, and pulls the weights toward 0.",
    )
    hess_init: float = Field(
        1e-3,
        gt=0,
        description="IVON's h before the first update: the prior sigma is "
        "1 / sqrt(lambda * (hess_init + delta)) (3e-5 at the defaults).",
    )
    beta2: float = Field(
        0.99,
        gt=0,
        lt=1,
        description="IVON's running-average rate of h: its estimates of the last ~1 / (1 - "
        "beta2) steps shape sigma.",
    )
    clip_radius: float = Field(
        0.02,
        gt=0,
        description="IVON's bound on each weight's Newton step (momentum + delta m) / (h + "
        "delta): a weight moves at most train.lr * clip_radius per step (1e-3 at the recipe's "
        "lr 0.05, AdamW's step there).",
    )


def posterior_std(hess: torch.Tensor, ess: float, delta: float) -> torch.Tensor:
    """sigma = 1 / sqrt(lambda * (h + delta)): the scale of IVON's posterior, per weight."""
    return (ess * (hess + delta)).rsqrt()


@contextmanager
def seeded(seed: int, device: torch.device):
    """Inside, torch's global generator, which IVON draws from, starts at `seed`; after, it is
    where it was."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


class SampledSteps:
    """IVON under rlvr's update loop, which opens each optimizer step with zero_grad and closes
    it with step: zero_grad moves the weights to a fresh posterior sample (IVON takes its
    gradients at samples), step restores the mean, handing IVON the sample's gradient (and with
    it the Price estimate of h), and steps. A zero_grad while a sample is held (a step skipped
    for a non-finite gradient) drops that sample. Samples are seeded by (seed, IVON's step), so
    a resumed run takes its gradients at the same weights."""

    def __init__(self, ivon, seed: int):
        self.ivon, self.seed = ivon, seed
        self.held: ExitStack | None = None  # inside IVON's sampled_params(train=True)

    @property
    def param_groups(self) -> list[dict]:
        return self.ivon.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.held is None:
            self.ivon.zero_grad(set_to_none=set_to_none)
            self.held = ExitStack()
            seed = sample_seed(self.seed, self.ivon.current_step, TRAINING_DRAW_STREAM)
            with seeded(seed, self.ivon._device):
                self.held.enter_context(self.ivon.sampled_params(train=True))
            return
        self.ivon.zero_grad(set_to_none=False)  # IVON reads a gradient as it restores the mean
        self.held.close()
        self.held = None
        self.ivon._reset_samples()  # the dropped sample must not enter the next step's average

    def step(self) -> None:
        self.held.close()
        self.held = None
        self.ivon.step()

    def state_dict(self) -> dict:
        return self.ivon.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.ivon.load_state_dict(state)


class Posterior:
    """IVON's posterior as rollout samples from it (rollout/weight_noise.py's WeightNoise)."""

    def __init__(self, ivon, samples: int):
        self.ivon, self.samples = ivon, samples

    def stds(self) -> torch.Tensor:
        """sigma of every trainable weight, flat, in IVON's order."""
        return torch.cat([
            posterior_std(g["hess"], g["ess"], g["weight_decay"]) for g in self.ivon.param_groups
        ])  # fmt: skip

    @contextmanager
    def sampled(self, seed: int):
        with seeded(seed, self.ivon._device), self.ivon.sampled_params():
            yield

    def metrics(self) -> dict[str, float]:
        stds = self.stds()
        return {
            "weight_sigma_min": float(stds.min()),
            "weight_sigma_median": float(stds.median()),
            "weight_sigma_max": float(stds.max()),
        }


def import_ivon():
    try:
        from ivon import IVON
    except ImportError as e:
        raise ConfigError(
            f"{KEY} trains with the IVON optimizer and samples from its posterior, but the "
            f"package ivon-opt is not installed; fix: {INSTALL} (or {KEY}=null)"
        ) from e
    return IVON


class C3PO(Method):
    """3PO / C3PO (arXiv 2608.09805): the policy trains with IVON, each group's replies are
    sampled over weight draws of its posterior, and train through the sequence-level IS mask."""

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
        import_ivon()

    def setup(self, run: Run) -> None:
        p, updater = self.params, run.updater
        self.ivon = import_ivon()(
            trainable_state_dict(run.model).values(), lr=run.cfg.train.lr, ess=p.ess,
            hess_init=p.hess_init, beta2=p.beta2, weight_decay=p.prior_precision,
            clip_radius=p.clip_radius, rescale_lr=False,
        )  # fmt: skip
        resumed = updater.optimizer.state_dict()
        if "hess" in resumed["param_groups"][0]:  # the checkpoint's optimizer was this IVON
            self.ivon.load_state_dict(resumed)
        scheduler = make_scheduler(run.cfg, self.ivon)
        scheduler.load_state_dict(updater.scheduler.state_dict())
        updater.optimizer, updater.scheduler = (
            SampledSteps(self.ivon, run.cfg.train.seed),
            scheduler,
        )
        run.source.noise = Posterior(self.ivon, p.weight_samples)

    def state_dict(self) -> dict:
        return {"ivon_step": self.ivon.current_step}  # IVON's debiasing count, not in its state

    def load_state_dict(self, state: dict) -> None:
        self.ivon.current_step = state["ivon_step"]
