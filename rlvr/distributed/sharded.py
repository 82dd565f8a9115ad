"""FSDP2 for the policy update (distributed.trainer_sharding = "fsdp"): each rank keeps 1/N of
the weights, gradients and optimizer state; every function here is a collective that all ranks
of the group call together."""

from __future__ import annotations

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


def shard_model(model: torch.nn.Module) -> torch.nn.Module:
    """Shard `model` in place: one FSDP unit per transformer block (named by the HF model's
    `_no_split_modules`) and one for the rest (embeddings, final norm, head)."""
    blocks = set(getattr(model, "_no_split_modules", None) or [])
    units = [module for module in model.modules() if type(module).__name__ in blocks]
    for unit in [*units, model]:
        fully_shard(unit)
        # The loss is already normalised by global token and sequence counts, so the ranks'
        # gradients must be summed, not averaged as FSDP does by default (a per-unit setting);
        # a plain SUM, since gloo has no pre-multiplied sum for FSDP's fp32 default.
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return model


def copy_full_trainable(sharded: torch.nn.Module, target: torch.nn.Module | None) -> None:
    """Gather each trainable parameter whole, one at a time (so no rank ever holds more than
    one unsharded tensor beyond its shards), into `target` (rank 0's full copy; None on the
    other ranks, which only take part in the gathers)."""
    params = dict(target.named_parameters()) if target is not None else {}
    with torch.no_grad():
        for name, param in sharded.named_parameters():
            if not param.requires_grad:
                continue  # frozen (a LoRA base): equal to the target's from the start
            full = param.full_tensor()
            if target is not None:
                params[name].copy_(full)


def full_optimizer_state(sharded: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer state gathered whole on rank 0 (keyed by parameter name); {} elsewhere."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(sharded, optimizer, options=options)


def load_full_state(
    sharded: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    weights: dict[str, torch.Tensor],
    optimizer_state: dict | None,
) -> None:
    """Scatter rank 0's full weights (and optimizer state, when resuming) into every rank's
    shards; the other ranks pass empty dicts and receive theirs by broadcast."""
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False)
    set_model_state_dict(sharded, weights, options=options)
    if optimizer_state is not None:
        set_optimizer_state_dict(sharded, optimizer, optimizer_state, options=options)


def local_numel(module: torch.nn.Module) -> int:
    """Elements of the parameters this rank holds (its shards, for a sharded module)."""
    return sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in module.parameters())
