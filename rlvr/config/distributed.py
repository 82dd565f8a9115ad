"""The `distributed` section: in this process, or on Ray rollout workers and trainer
ranks."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section


class DistributedConfig(Section):
    """Where the work runs: in this process, or on Ray actors (rlvr/distributed/)."""

    backend: Literal["local", "ray"] = Field(
        "local",
        description="'local': everything in this process. 'ray': rollout workers (and trainer "
        "ranks beyond the first) are Ray actors; needs `pip install rlvr[ray]`.",
    )
    address: str | None = Field(
        None,
        description="ray: None starts Ray on this machine; 'auto' or 'ray://HOST:10001' joins "
        "a running cluster (the model path must be readable on every node).",
    )
    rollout_workers: int = Field(
        2, gt=0, description="ray: rollout actors, each with its own copy of the policy and engine."
    )
    trainer_ranks: int = Field(
        1,
        gt=0,
        description="ray: data-parallel ranks of the policy update (gloo on CPU, NCCL on GPU); "
        "rank 0 is this process, the others are Ray actors.",
    )
    trainer_sharding: Literal["replicate", "fsdp"] = Field(
        "replicate",
        description="ray: 'replicate' (torch's DistributedDataParallel, its gradients summed "
        "over ranks, not averaged): every trainer rank holds the whole policy and optimizer "
        "state. 'fsdp' (FSDP2): each holds 1/trainer_ranks of the weights, gradients "
        "and optimizer state, for a policy whose training state does not fit one device; rank 0 "
        "also keeps the whole weights the rollout and the checkpoints read.",
    )
    placement: Literal["colocated", "disaggregated"] = Field(
        "colocated",
        description="ray: 'colocated' puts rollout worker i and trainer rank i in one placement "
        "bundle (sharing its devices); 'disaggregated' gives rollout and training their own.",
    )
    worker_cpus: float = Field(
        1.0, gt=0, description="ray: CPUs reserved per rollout worker and per trainer rank."
    )
    worker_gpus: float = Field(
        0.0,
        ge=0,
        description="ray: GPUs per rollout worker and trainer rank (a fraction shares a device).",
    )
    torch_threads: int = Field(1, gt=0, description="ray: torch intra-op threads in each actor.")
    rollout_timeout: float = Field(
        600.0,
        gt=0,
        description="ray: seconds a rollout or weight load may take before the run stops with "
        "an error (never a silent hang).",
    )
    max_restarts: int = Field(
        3,
        ge=0,
        description="ray: times a dead actor is restarted; its unfinished rollouts are sampled "
        "again with the same seeds and weights, so nothing is lost or counted twice.",
    )
