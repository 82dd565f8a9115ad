"""Coalesce single calls from many threads into batched calls, so a model-based reward called
from a thread pool makes one forward pass per batch instead of one per response."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Slot:
    """One caller's item, and what the thread that ran its batch left for it."""

    def __init__(self, item: Any):
        self.item = item
        self.arrived = time.monotonic()
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class Batcher(Generic[Item, Result]):
    """Call it with one item from any thread; concurrent items share one `batch_fn` call.

    A batch runs once `max_batch_size` items wait, or `max_wait_s` after its oldest item
    arrived. There is no background thread: one waiting caller runs each batch, one batch at
    a time, and an exception from `batch_fn` is raised to every caller of that batch.
    """

    def __init__(
        self,
        batch_fn: Callable[[list[Item]], Sequence[Result]],
        max_batch_size: int,
        max_wait_s: float = 0.01,  # short: a lone sequential caller pays it on every call
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be non-negative, got {max_wait_s}")
        self.batch_fn = batch_fn
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # the collecting caller waits here
        self._finished = threading.Condition(self._lock)  # everyone else waits here
        self._pending: list[_Slot] = []
        self._busy = False  # a caller is collecting or running a batch

    def __call__(self, item: Item) -> Result:
        slot = _Slot(item)
        with self._lock:
            self._pending.append(slot)
            self._arrived.notify()
        while True:
            with self._lock:
                while self._busy and not slot.done:
                    self._finished.wait()
                if slot.done:
                    break
                # Not busy and not done means this caller's item is still pending: collect.
                self._busy = True
                batch = self._collect()
            self._run(batch)
        if slot.error is not None:
            raise slot.error
        return slot.result

    def _collect(self) -> list[_Slot]:
        """Wait (lock held) for a full batch or the oldest item's deadline; take the batch."""
        deadline = self._pending[0].arrived + self.max_wait_s
        while len(self._pending) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._arrived.wait(remaining)
        batch = self._pending[: self.max_batch_size]
        del self._pending[: self.max_batch_size]
        return batch

    def _run(self, batch: list[_Slot]) -> None:
        results: Sequence[Any] = ()
        error: BaseException | None = None
        try:
            results = self.batch_fn([slot.item for slot in batch])
            if len(results) != len(batch):
                raise ValueError(
                    f"batch_fn returned {len(results)} results for a batch of {len(batch)} items"
                )
        except BaseException as e:  # even KeyboardInterrupt must release the other callers
            error = e
        with self._lock:
            for index, slot in enumerate(batch):
                if error is None:
                    slot.result = results[index]
                else:
                    slot.error = error
                slot.done = True
            self._busy = False
            self._finished.notify_all()
