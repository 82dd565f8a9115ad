import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlvr.rewards.batching import Batcher

TIMEOUT = 10  # seconds; a deadlock fails the test instead of hanging it


def call_concurrently(batcher, items):
    """Call `batcher` once per item, each from its own thread, all released at once."""
    start = threading.Barrier(len(items))

    def one(item):
        start.wait(TIMEOUT)
        return batcher(item)

    with ThreadPoolExecutor(len(items)) as pool:
        futures = [pool.submit(one, item) for item in items]
        return [f.exception(TIMEOUT) or f.result() for f in futures]


def test_concurrent_calls_share_batches_and_get_their_own_results():
    sizes, running, overlap = [], [0], []

    def double(items):
        running[0] += 1
        overlap.append(running[0])
        sizes.append(len(items))
        time.sleep(0.02)  # long enough for the next callers to pile up
        running[0] -= 1
        return [2 * x for x in items]

    batcher = Batcher(double, max_batch_size=8, max_wait_s=0.05)
    items = list(range(40))
    assert call_concurrently(batcher, items) == [2 * x for x in items]
    assert sum(sizes) == len(items)
    assert max(sizes) <= 8
    assert max(sizes) > 1  # concurrent calls were coalesced
    assert max(overlap) == 1  # one batch at a time


def test_full_batch_flushes_without_waiting_for_the_deadline():
    sizes = []

    def identity(items):
        sizes.append(len(items))
        return items

    batcher = Batcher(identity, max_batch_size=4, max_wait_s=60)
    start = time.monotonic()
    assert call_concurrently(batcher, [1, 2, 3, 4]) == [1, 2, 3, 4]
    assert time.monotonic() - start < TIMEOUT
    assert sizes == [4]


def test_an_exception_reaches_every_caller_of_the_batch():
    def boom(items):
        raise RuntimeError(f"batch of {len(items)} failed")

    # A deadline far away: the four calls can only leave as one full batch.
    batcher = Batcher(boom, max_batch_size=4, max_wait_s=60)
    errors = call_concurrently(batcher, ["a", "b", "c", "d"])
    assert all(isinstance(e, RuntimeError) and str(e) == "batch of 4 failed" for e in errors)


def test_a_wrong_number_of_results_is_an_error_for_all():
    batcher = Batcher(lambda items: items[:-1], max_batch_size=2, max_wait_s=60)
    errors = call_concurrently(batcher, [1, 2])
    assert all(isinstance(e, ValueError) and "1 results" in str(e) for e in errors)


def test_the_batcher_recovers_after_a_failed_batch():
    calls = []

    def flaky(items):
        calls.append(items)
        if len(calls) == 1:
            raise RuntimeError("once")
        return items

    batcher = Batcher(flaky, max_batch_size=4, max_wait_s=0.001)
    with pytest.raises(RuntimeError, match="once"):
        batcher("x")
    assert batcher("y") == "y"


def test_a_lone_caller_is_flushed_after_the_wait():
    sizes = []

    def identity(items):
        sizes.append(len(items))
        return items

    batcher = Batcher(identity, max_batch_size=64, max_wait_s=0.01)
    with ThreadPoolExecutor(1) as pool:
        results = pool.submit(lambda: [batcher(i) for i in range(5)]).result(TIMEOUT)
    assert results == list(range(5))
    assert sizes == [1] * 5


@pytest.mark.parametrize("size, wait", [(0, 0.01), (4, -1.0)])
def test_invalid_settings_are_rejected(size, wait):
    with pytest.raises(ValueError):
        Batcher(lambda items: items, max_batch_size=size, max_wait_s=wait)
