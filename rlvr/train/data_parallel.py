"""Data parallelism for the policy update: each rank computes its share of every minibatch and
the gradients are summed over ranks, so N ranks take the same optimizer step as one process."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from rlvr.train.batching import by_length

T = TypeVar("T")


@dataclass(frozen=True)
class DataParallel:
    """This process's place in the update group (rank 0 of 1 = no parallelism).

    Every rank holds the whole batch and computes the loss normalisers (token and sequence
    counts) over the whole minibatch, so summing the ranks' gradients gives exactly the
    gradient one process would compute: no rescaling, whatever each rank's share. A replicated
    model runs its passes through `replica`, torch's DistributedDataParallel, whose gradients
    sum (not average) over the group; `sharded`: the model is FSDP2-sharded
    (rlvr/distributed/sharded.py), which sums the gradients itself during backward. `join`
    builds either from the process group."""

    rank: int = 0
    world_size: int = 1
    sharded: bool = False
    replica: DistributedDataParallel | None = None

    @classmethod
    def join(cls, model: torch.nn.Module, sharded: bool) -> DataParallel:
        """This process's place in the default process group, for `model` (already sharded
        when `sharded`); a replicated model of several ranks is wrapped in DDP, whose
        construction is collective: every rank calls this at the same point."""
        rank, world = dist.get_rank(), dist.get_world_size()
        replica = None if sharded or world == 1 else replicate(model)
        return cls(rank, world, sharded, replica)

    def computing(self, model: torch.nn.Module) -> torch.nn.Module:
        """What the update's passes call: the DDP wrapper of a replicated `model`, else it."""
        if self.replica is None:
            if self.world_size > 1 and not self.sharded:  # nothing would sum the gradients
                raise ValueError("a replicated update of several ranks needs DataParallel.join")
            return model
        if self.replica.module is not model:
            raise ValueError("DataParallel.replica wraps another model than the one updated")
        return self.replica

    def accumulate(self, passes: Sequence[T], idle: T) -> Iterator[T]:
        """The micro-batch passes of one optimizer step, each to run forward and backward
        while it is current. Under DDP all but the last run inside no_sync(), so gradients
        accumulate locally and the last pass's backward sums them over the group, bucket by
        bucket as backward produces them. Each rank must join that one reduction per step: a
        rank with no rows of its own this step runs `idle` (an uncounted pass)."""
        if self.replica is None:
            yield from passes
            return
        passes = list(passes) or [idle]
        for item in passes[:-1]:
            with self.replica.no_sync():
                yield item
        yield passes[-1]

    def share(self, minibatch: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a minibatch (row indices); may be empty for a tiny minibatch."""
        return minibatch.tensor_split(self.world_size)[self.rank]

    def micro_batches(
        self,
        minibatch: torch.Tensor,
        size: int,
        lengths: torch.Tensor,
        units: torch.Tensor | None = None,
    ) -> Iterator[tuple[torch.Tensor, bool]]:
        """(rows, counted) for each micro-batch of this rank's share, longest rows first so
        that each micro-batch pads to a length near its own (`lengths` [B]: each row's), rows
        of one prompt together where `units` [B] says which share one (`by_length`).
        A sharded model gathers its weights in every forward and scatters gradients in every
        backward, collectives that all ranks must join: a rank with fewer rows makes up the
        count with uncounted passes over one row, whose loss is multiplied by zero."""
        own = [
            rows
            for rows in by_length(self.share(minibatch), lengths, units).split(size)
            if len(rows)
        ]
        yield from ((rows, True) for rows in own)
        if self.sharded:
            largest = len(minibatch.tensor_split(self.world_size)[0])  # rank 0's share
            most = -(-largest // size)
            yield from ((minibatch[:1], False) for _ in range(most - len(own)))

    def sum_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(tensor)
        return tensor

    def sum_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Per-rank metric sums added up over the group; a rank with no rows sent none."""
        if self.world_size == 1:
            return metrics
        gathered: list[dict[str, float]] = [{} for _ in range(self.world_size)]
        dist.all_gather_object(gathered, dict(metrics))
        total: dict[str, float] = {}
        for part in gathered:
            for name, value in part.items():
                total[name] = total.get(name, 0.0) + value
        return total


def replicate(model: torch.nn.Module) -> DistributedDataParallel:
    """`model` under DDP (gloo on CPU, NCCL on GPU), its gradients summed over the group.

    Construction broadcasts rank 0's weights. The ranks' passes differ in number (each computes
    its own share of rows) and in shape (a shared-prompt pass calls the model twice), so DDP
    must not broadcast buffers before each forward (a collective that would then not line up;
    the buffers, rotary frequencies and the like, never change). Every trainable parameter takes
    part in every pass, so no search for unused ones."""
    quiet = "forward_sync_buffers"  # torch 2.13 renamed broadcast_buffers to this
    if quiet not in inspect.signature(DistributedDataParallel).parameters:
        quiet = "broadcast_buffers"
    replica = DistributedDataParallel(model, **{quiet: False})
    replica.register_comm_hook(None, _sum_hook)
    return replica


def _sum_hook(_state, bucket):  # unannotated: DDP checks annotations, which are strings here
    """DDP's all-reduce of a dist.GradBucket without its division by the world size: the loss
    normalisers are the whole minibatch's, so the ranks' gradients add up to one process's."""
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda done: done.value()[0])


SINGLE = DataParallel()
