"""The `train` section: optimisation, schedule, eval and checkpoints, and the monitor rules
checked over the metrics stream."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlvr.config.base import Section


class MonitorRule(Section):
    """One rule over the metrics stream: when `metric` stays above or below a bound for `steps`
    steps in a row, act."""

    metric: str = Field(
        description="A logged metric, e.g. 'entropy', 'grad_norm', 'eval/accuracy'."
    )
    above: float | None = Field(None, description="Fire when the metric is above this.")
    below: float | None = Field(None, description="Fire when the metric is below this.")
    steps: int = Field(1, gt=0, description="Consecutive steps (that log the metric) it must hold.")
    action: Literal["warn", "stop", "lower_lr"] = Field(
        "warn",
        description="'warn': say so; 'stop': checkpoint and stop (resume continues); "
        "'lower_lr': multiply the learning rate by `factor`.",
    )
    factor: float = Field(0.5, gt=0, lt=1, description="lower_lr: the learning rate's multiplier.")
    name: str = Field("", description="Its name in metrics (monitor/<name>) and messages.")

    @model_validator(mode="after")
    def _one_bound(self) -> MonitorRule:
        if (self.above is None) == (self.below is None):
            raise ValueError(
                f"monitor on '{self.metric}' needs exactly one of above / below; fix: e.g. "
                f'{{metric = "{self.metric}", below = 0.05}}'
            )
        if not self.name:
            side, bound = ("above", self.above) if self.above is not None else ("below", self.below)
            self.name = f"{self.metric}_{side}_{bound:g}"
        return self


class TrainConfig(Section):
    steps: int = Field(15, gt=0, description="RL steps (each: sample a batch, score it, update).")
    lr: float = Field(
        1e-4,
        gt=0,
        description="Peak learning rate of AdamW, tuned for the tiny model; left unset, `rlvr train` "
        "gives a pretrained model 1e-6 (2e-5 with LoRA) and a task its tuned rate (docs/settings.md: "
        "recommended settings).",
    )
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="Learning-rate schedule after warmup."
    )
    warmup_steps: int = Field(0, ge=0, description="Linear warmup, in optimizer steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(
        1.0, gt=0, description="Gradient clipping threshold (global L2 norm)."
    )
    autocast: Literal["off", "bfloat16"] = Field(
        "off",
        description="'bfloat16': the update's and the old/reference logprob passes' matmuls run "
        "under torch.autocast in bf16 (weights, optimizer and logprob math stay float32). Faster "
        "where the hardware has bf16 (GPU, CPU with avx512_bf16 or AMX): see benchmarks/bf16.py.",
    )
    micro_batch_size: int = Field(
        64,
        gt=0,
        description="Sequences per forward/backward; gradients accumulate up to the minibatch.",
    )
    skip_zero_advantage: bool = Field(
        True,
        description="Skip the update's passes over rows whose advantages are all 0 (a group "
        "whose replies all scored alike, under GRPO). Exact: such a row adds nothing to the "
        "gradient when the loss weights each token by its advantage and no KL term in the loss, "
        "entropy bonus or teacher term reads it, and only then is it skipped. `skipped_rows` "
        "logs the share; `entropy` is then over the rows trained.",
    )
    share_prompt: bool = Field(
        True,
        description="Training and old/reference logprob passes run the prompt that a group's "
        "samples share once per micro-batch and reuse its KV cache (with grad) for every sample: "
        "the same logprobs and gradients for less compute (an FSDP2-sharded update runs "
        "without it). false for a model whose forward cannot continue from a cache.",
    )
    seed: int = Field(
        0, description="Global seed: data order, sampling (with step and sample index), init."
    )
    eval_every: int = Field(
        20, ge=0, description="Run held-out eval every this many steps; 0 = only at start and end."
    )
    eval_k: int = Field(
        4,
        gt=0,
        description="Samples per eval problem for pass@k (k = eval_k); 1 skips sampling. Every "
        "eval samples with the same seeds, so pass@k changes only when the model does.",
    )
    save_every: int = Field(
        50, ge=0, description="Write a checkpoint every this many steps; 0 = only at the end."
    )
    max_bad_steps: int = Field(
        3, gt=0, description="Abort after this many consecutive non-finite steps."
    )
    monitors: list[MonitorRule] = Field(
        default_factory=lambda: [
            MonitorRule(metric="entropy", below=0.03, steps=5, name="entropy_collapse"),
            MonitorRule(metric="grad_norm", above=1000.0, steps=2, name="grad_norm_explodes"),
        ],
        description="Rules over the metrics stream, checked after every step (see MonitorRule "
        "in docs/config.md): the default warns when the sampled entropy collapses below 0.03 "
        "for 5 steps and when the gradient norm stays above 1000; [] = none.",
    )
