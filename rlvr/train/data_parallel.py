"""Data parallelism for the policy update: each rank computes its share of every minibatch and
the gradients are summed over ranks, so N ranks take the same optimizer step as one process."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rlvr.train.batching import by_length

BUCKET_ELEMENTS = 1 << 24  # gradients are summed in flat buckets of this many elements


@dataclass(frozen=True)
class DataParallel:
    """This process's place in the update group (rank 0 of 1 = no parallelism).

    Every rank holds the whole batch and computes the loss normalisers (token and sequence
    counts) over the whole minibatch, so summing the ranks' gradients gives exactly the
    gradient one process would compute: no rescaling, whatever each rank's share. `sharded`:
    the model is FSDP2-sharded (rlvr/distributed/sharded.py), which sums the gradients itself
    during backward."""

    rank: int = 0
    world_size: int = 1
    sharded: bool = False

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

    def sum_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        """All-reduce (sum) the gradients of the trainable parameters over the group."""
        if self.world_size == 1 or self.sharded:
            return
        params = [p for p in parameters if p.requires_grad]
        for p in params:  # a rank whose share was empty still takes part in every reduce
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket: list[torch.Tensor] = []
        size = 0
        for p in params:
            bucket.append(p.grad)
            size += p.grad.numel()
            if size >= BUCKET_ELEMENTS:
                _reduce_bucket(bucket)
                bucket, size = [], 0
        if bucket:
            _reduce_bucket(bucket)

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


def _reduce_bucket(grads: list[torch.Tensor]) -> None:
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


SINGLE = DataParallel()
