"""The compute-centric profiler: each step's phases timed, their FLOPs estimated from the model's
shape and the batch, and the achieved rate set against a matrix-multiply peak measured here, on
the model's device and in the dtype its matmuls run in."""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from torch import nn

from rlvr.models.shared_prefix import Prompts, batch_prompts, worth_sharing
from rlvr.train.batching import by_length
from rlvr.types import Batch, Trajectory

# The phases of step(), in order; they partition it, so their times add up to time/step.
PHASES = (
    "rollout", "baseline_rollout", "calibration", "exploration", "old_logprobs", "ref_logprobs",
    "teacher_logprobs", "values", "advantages",
    "update", "weight_sync", "critic", "metrics",
)  # fmt: skip
OUTSIDE = ("eval", "checkpoint")  # timed in the loop around step(), not inside it


@contextmanager
def timed(timings: dict[str, float], name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


@dataclass(frozen=True)
class ModelShape:
    """What a transformer's FLOPs depend on. `body` counts the weights of every linear layer
    but the output head; a token costs 2 FLOPs per weight it meets, and attention adds
    4 x layers x attention width x the positions it attends to (scores and weighted values)."""

    body: int  # weights in the linear layers below the head
    head: int  # weights in the output head (vocabulary x hidden)
    layers: int
    attention_width: int  # query heads x head size
    hidden: int

    @classmethod
    def of(cls, model: nn.Module) -> ModelShape:
        head = model.get_output_embeddings()
        linear = [m for m in model.modules() if isinstance(m, nn.Linear) and m is not head]
        config = model.config
        heads, hidden = config.num_attention_heads, config.hidden_size
        return cls(
            body=sum(m.in_features * m.out_features for m in linear),
            head=head.in_features * head.out_features if isinstance(head, nn.Linear) else 0,
            layers=config.num_hidden_layers,
            attention_width=heads * (getattr(config, "head_dim", None) or hidden // heads),
            hidden=hidden,
        )

    def critic(self) -> ModelShape:
        """A value model on this body: the head is one number per position."""
        return replace(self, head=self.hidden)

    def forward(
        self, rows: int, width: int, head_tokens: int | None = None, past: int = 0
    ) -> float:
        """FLOPs of one forward over a [rows, width] batch, attention dense over the width and
        `past` cached positions (as the kernels compute it); the head on `head_tokens`
        positions (default: all)."""
        tokens = rows * width
        attention = 4 * self.layers * self.attention_width * rows * width * (past + width)
        head = tokens if head_tokens is None else head_tokens
        return 2.0 * self.body * tokens + attention + 2.0 * self.head * head

    def sequence(self, length: int, head_tokens: int) -> float:
        """FLOPs of processing one sequence token by token with a KV cache (each position
        attends to itself and those before it), the head on `head_tokens` positions."""
        attention = 4 * self.layers * self.attention_width * length * (length + 1) // 2
        return 2.0 * self.body * length + attention + 2.0 * self.head * head_tokens


def micro_batch_forwards(
    shape: ModelShape, lengths: torch.Tensor, micro: int, prompts: Prompts | None = None
) -> tuple[float, int, int]:
    """FLOPs, computed positions and real (unpadded) positions of a teacher-forced pass in
    micro-batches of `micro` rows in the trainer's order, each trimmed to its longest sequence
    (the layout for one minibatch on one rank; with several, each is ordered on its own). With
    `prompts`, a micro-batch that shares runs each distinct prompt once, the head on its last
    position only, then every row's suffix attending to the prompts' cache."""
    flops, computed, real = 0.0, 0, 0
    units = None if prompts is None else prompts.unit
    for rows in by_length(torch.arange(len(lengths)), lengths, units).split(micro):
        if prompts is None or not worth_sharing(prompts, rows):
            width = int(lengths[rows].max())
            flops += shape.forward(len(rows), width)
            computed, real = computed + len(rows) * width, real + int(lengths[rows].sum())
            continue
        unit, source = torch.unique(prompts.unit[rows], return_inverse=True)
        prompt = torch.zeros(len(unit), dtype=torch.long).scatter(0, source, prompts.length[rows])
        suffix = lengths[rows] - 1 - prompts.length[rows]
        past, width = int(prompt.max()), int(suffix.max())
        flops += shape.forward(len(unit), past, head_tokens=len(unit))
        flops += shape.forward(len(rows), width, past=past)
        computed += len(unit) * past + len(rows) * width
        real += int(prompt.sum() + suffix.sum())
    return flops, computed, real


def step_flops(
    shape: ModelShape,
    trajectories: list[Trajectory],
    batch: Batch,
    micro: int,
    passes: dict[str, float],
    prompts: Prompts | None = None,
    update_rows: torch.Tensor | None = None,
) -> dict[str, float]:
    """FLOPs of each phase of one step. Generation counts each sequence once with a KV cache
    (what any engine must compute; padding and finished rows an engine keeps are extra).
    `passes`: forward passes over the batch per phase (the update counts 3 per epoch:
    forward and a backward of twice its cost); `prompts`: the policy passes share them;
    `update_rows`: the rows the update ran on (default: all), which `tokens/trained` counts."""
    generated = sum(t.num_generated for t in trajectories)
    # every token but the last is processed once (the last is sampled, never fed back)
    flops = {
        "generate": sum(shape.sequence(len(t.token_ids) - 1, t.num_generated) for t in trajectories)
    }
    lengths = batch.attention_mask.sum(-1)
    policy_pass, computed, real = micro_batch_forwards(shape, lengths, micro, prompts)
    critic_pass, _, _ = micro_batch_forwards(shape.critic(), lengths, micro)
    update_rows = torch.arange(len(lengths)) if update_rows is None else update_rows
    update_prompts = (
        None if prompts is None else Prompts(prompts.unit[update_rows], prompts.length[update_rows])
    )
    update_pass = micro_batch_forwards(shape, lengths[update_rows], micro, update_prompts)[0]
    for phase, count in passes.items():
        one = {"values": critic_pass, "critic": critic_pass, "update": update_pass}
        flops[phase] = count * one.get(phase, policy_pass)
    return {
        **{f"flops/{phase}": value for phase, value in flops.items() if value},
        "flops_per_pass/policy": policy_pass,
        "flops_per_pass/critic": critic_pass,
        "tokens/generated": float(generated),
        "tokens/trained": float(lengths[update_rows].sum()),
        "tokens/shared_prompt": float(lengths.sum() - real),  # positions sharing skipped
        "padding/train": 1.0 - real / max(computed, 1),
    }


def utilisation(metrics: dict[str, float], peak: float) -> dict[str, float]:
    """Achieved FLOP/s of each phase with a FLOP estimate and a time, and its share of `peak`."""
    out = {}
    for key, flops in list(metrics.items()):
        if not key.startswith("flops/"):
            continue
        phase = key.removeprefix("flops/")
        seconds = metrics.get(f"time/{phase}", 0.0)
        if seconds > 0:
            out[f"flops_per_sec/{phase}"] = flops / seconds
            out[f"utilisation/{phase}"] = flops / seconds / peak
    return out


@dataclass(frozen=True)
class Peak:
    """The best matrix-multiply rate measured on `device` in `dtype`: what 100% utilisation
    means for a model computing there."""

    flops: float  # FLOP/s
    device: str
    dtype: str  # "float32", "bfloat16", ...
    threads: int  # torch's intra-op threads (what a CPU peak depends on)

    def __str__(self) -> str:
        where = f"{self.threads} threads" if self.device == "cpu" else self.device
        return f"{self.flops / 1e9:.1f} GFLOP/s ({self.dtype} matmul on {where})"


def compute_setting(model: nn.Module, autocast: str = "off") -> tuple[torch.device, torch.dtype]:
    """Where and in what dtype `model`'s matmuls run: the device and dtype of its largest weight
    (under LoRA the frozen base's, not the adapters'), bfloat16 under train.autocast=bfloat16
    (the update's and the logprob passes' matmuls, most of a step's FLOPs)."""
    weight = max(model.parameters(), key=lambda p: p.numel())
    return weight.device, torch.bfloat16 if autocast == "bfloat16" else weight.dtype


@functools.cache
def peak_flops(
    device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, seconds: float = 0.2
) -> Peak:
    """The best rate of a square `dtype` matmul on `device` over about `seconds` (measured once
    per process and setting). On a CPU it is this process's threads' rate at 512 x 512; on an
    accelerator 4096 x 4096, each timing waiting for the device to finish."""
    device = torch.device(device)
    size = 512 if device.type == "cpu" else 4096
    sync = getattr(torch, device.type).synchronize  # torch.cpu's is a no-op
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    a @ b  # the first call pays for thread start-up, kernel selection and caches
    sync(device)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        a @ b
        sync(device)
        best = max(best, 2.0 * size**3 / (time.perf_counter() - start))
    return Peak(best, str(device), str(dtype).removeprefix("torch."), torch.get_num_threads())


def mean_metrics(steps: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over `steps`, counting a step that lacks it as 0."""
    keys = {key for step in steps for key in step}
    return {key: sum(step.get(key, 0.0) for step in steps) / len(steps) for key in keys}


def step_total(metrics: dict[str, float]) -> float:
    """All FLOPs a step's phases did (one pass's cost, `flops_per_pass/*`, is not a phase)."""
    return sum(value for key, value in metrics.items() if key.startswith("flops/"))


def phase_table(steps: list[dict[str, float]]) -> list[tuple[str, float, float, float, float]]:
    """(phase, mean seconds, share of the step, mean FLOPs, utilisation) over `steps`, for the
    phases of step() and those around it; `unaccounted` is what no phase timed. The rollout's
    utilisation is generation's (its FLOPs over time/generate, without the reward)."""

    means = mean_metrics(steps)

    def mean(key: str) -> float:
        return means.get(key, 0.0)

    step = mean("time/step")
    rows = []
    for phase in (*PHASES, *OUTSIDE):
        seconds = mean(f"time/{phase}")
        counted = "generate" if phase == "rollout" else phase  # the rollout's FLOPs: generation's
        if seconds or mean(f"flops/{counted}"):
            flops, used = mean(f"flops/{counted}"), mean(f"utilisation/{counted}")
            rows.append((phase, seconds, seconds / step, flops, used))
    inside = sum(mean(f"time/{phase}") for phase in PHASES)
    rows.append(("unaccounted", step - inside, (step - inside) / step, 0.0, 0.0))
    return rows


def cost_model(step: dict[str, float], epochs: int, critic_updates: int) -> list[tuple[str, float]]:
    """The survey's cost model of a step, from this step's generation FLOPs and the FLOPs of one
    forward pass over its batch by the policy (P) and by a value model (C): GRPO pays for
    generation and the update (3P per epoch, plus old logprobs once there are several epochs); a
    KL reference adds P; PPO adds the reference, old logprobs, the critic's values (C) and its
    updates (3C per epoch and critic pass). (name, FLOPs) per layout."""
    generate, p, c = (
        step["flops/generate"],
        step["flops_per_pass/policy"],
        step["flops_per_pass/critic"],
    )
    critic_free = generate + 3 * p * epochs + (p if epochs > 1 else 0.0)
    actor_critic = generate + 2 * p + c + 3 * p * epochs + 3 * c * epochs * critic_updates
    return [
        ("GRPO", critic_free),
        ("GRPO + KL reference", critic_free + p),
        ("PPO (critic + reference)", actor_critic),
    ]


def step_profile(
    shape: ModelShape, cfg, step, data, result, critic: bool, peak: Peak
) -> dict[str, float]:
    """Tokens per second generated and trained this step, the FLOPs of each of its phases, and
    the share of `peak` (the matmul rate on the model's device and dtype) each achieved. `data` holds the rows the update ran on (all
    but `result.trained`'s skipped ones), `critic` whether a critic ran."""
    algo, batch, timings = cfg.algo, data.batch, step.timings
    trained = torch.arange(len(batch)) if result.trained is None else result.trained
    generated = float(sum(t.num_generated for t in step.trajectories))
    seen = float(batch.attention_mask[trained].sum())
    rates = {
        "tokens_per_sec/generate": generated / max(timings["time/generate"], 1e-9),
        "tokens_per_sec/train": seen * algo.ppo_epochs / max(timings["time/update"], 1e-9),
    }
    passes = {
        "old_logprobs": float(data.old_logprobs is not None),
        "ref_logprobs": float(data.ref_logprobs is not None),
        "values": float(critic),
        "update": 3.0 * algo.ppo_epochs * bool(result.metrics),
        "critic": 3.0 * algo.critic_updates * algo.ppo_epochs * critic,
    }
    prompts = batch_prompts(batch, cfg.train.share_prompt)
    micro = cfg.train.micro_batch_size
    flops = step_flops(shape, step.trajectories, batch, micro, passes, prompts, trained)
    return {**rates, **flops, **utilisation({**flops, **timings}, peak.flops)}
