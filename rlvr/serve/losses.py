"""The Tinker SDK's built-in losses, each computed by the rlvr loss it names: same formula, summed
over a datum's tokens (Tinker reduces every loss by a plain sum), so a gradient step means the
same on both sides."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from rlvr.algos.losses import LOSSES, DroParams, LossInputs
from rlvr.config import AlgoConfig

UNBOUNDED = 1e9  # a clip this wide never binds: the plain importance ratio

# loss_fn_config keys the SDK may send, with Tinker's defaults
DEFAULTS: dict[str, dict[str, float]] = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "dro": {"beta": 0.05},
}

# loss_fn_inputs each loss reads, besides target_tokens
INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("weights",),
    "importance_sampling": ("logprobs", "advantages"),
    "ppo": ("logprobs", "advantages"),
    "cispo": ("logprobs", "advantages"),
    "dro": ("logprobs", "advantages"),
}

UNSUPPORTED = {
    "gspo": "its sequence_ratio_mask semantics are not public",
    "stable_reinforce": "it needs stability records the sampler keeps server-side",
    "custom": "the SDK runs custom losses client-side through forward and cross_entropy",
}


@dataclass
class Batch:
    """A forward_backward's datums, right-padded to one width."""

    loss_mask: torch.Tensor  # [B, T] 1 on each datum's positions
    inputs: dict[str, torch.Tensor]  # loss_fn_inputs by name, each [B, T] float


def settings(name: str, config: Mapping[str, float] | None) -> dict[str, float]:
    """The loss's settings: Tinker's defaults overridden by loss_fn_config; ValueError naming an
    unknown loss or key."""
    if name in UNSUPPORTED:
        raise ValueError(f"loss_fn {name!r} is not served by rlvr: {UNSUPPORTED[name]}")
    if name not in DEFAULTS:
        raise ValueError(f"unknown loss_fn {name!r}; rlvr serves {sorted(DEFAULTS)}")
    unknown = sorted(set(config or {}) - set(DEFAULTS[name]))
    if unknown:
        allowed = sorted(DEFAULTS[name]) or "none"
        raise ValueError(f"loss_fn_config keys {unknown} are not settings of {name!r} ({allowed})")
    return {**DEFAULTS[name], **{k: float(v) for k, v in (config or {}).items()}}


def _algo(low: float, high: float) -> AlgoConfig:
    return AlgoConfig(loss_agg="token-sum", clip_low=low, clip_high=high)


def _inputs(logprobs: torch.Tensor, batch: Batch, advantages: str, old: torch.Tensor):
    return LossInputs(
        logprobs=logprobs,
        old_logprobs=old,
        advantages=batch.inputs[advantages],
        loss_mask=batch.loss_mask,
        num_tokens=float(batch.loss_mask.sum()),
        num_seqs=batch.loss_mask.shape[0],
    )


def cross_entropy(logprobs: torch.Tensor, batch: Batch, cfg: dict) -> torch.Tensor:
    """-sum(weights * log p): reinforce with the weights as advantages."""
    inputs = _inputs(logprobs, batch, "weights", logprobs.detach())
    return LOSSES["reinforce"](inputs, _algo(0.2, 0.2)).loss


def importance_sampling(logprobs: torch.Tensor, batch: Batch, cfg: dict) -> torch.Tensor:
    """-sum(p / q * A): ppo_clip whose clip never binds."""
    inputs = _inputs(logprobs, batch, "advantages", batch.inputs["logprobs"])
    return LOSSES["ppo_clip"](inputs, _algo(UNBOUNDED, UNBOUNDED)).loss


def _clip(cfg: dict) -> AlgoConfig:
    """Tinker's ratio thresholds as rlvr's distances from 1."""
    low, high = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
    if not 0 <= low <= 1 <= high:
        raise ValueError(
            f"loss_fn_config needs 0 <= clip_low_threshold <= 1 <= clip_high_threshold; got "
            f"{low} and {high}"
        )
    return _algo(1 - low, high - 1)


def ppo(logprobs: torch.Tensor, batch: Batch, cfg: dict) -> torch.Tensor:
    """-sum(min(r A, clip(r, low, high) A)), r = p / q."""
    inputs = _inputs(logprobs, batch, "advantages", batch.inputs["logprobs"])
    return LOSSES["ppo_clip"](inputs, _clip(cfg)).loss


def cispo(logprobs: torch.Tensor, batch: Batch, cfg: dict) -> torch.Tensor:
    """-sum(sg(clip(r, low, high)) A log p)."""
    inputs = _inputs(logprobs, batch, "advantages", batch.inputs["logprobs"])
    return LOSSES["cispo"](inputs, _clip(cfg)).loss


def dro(logprobs: torch.Tensor, batch: Batch, cfg: dict) -> torch.Tensor:
    """-sum(A log p - beta / 2 (log p - log q)^2)."""
    inputs = _inputs(logprobs, batch, "advantages", batch.inputs["logprobs"])
    return LOSSES["dro"](inputs, _algo(0.2, 0.2), params=DroParams(beta=cfg["beta"])).loss


LossFn = Callable[[torch.Tensor, Batch, dict], torch.Tensor]
TINKER_LOSSES: dict[str, LossFn] = {
    "cross_entropy": cross_entropy,
    "importance_sampling": importance_sampling,
    "ppo": ppo,
    "cispo": cispo,
    "dro": dro,
}
