"""Throughput of the code sandbox, and what hostile programs in a batch cost the rest.

Prints one JSON object: executions per second for a trivial program and for a typical assert
test suite (10 asserts on a small function, scored end to end by CodeTests) on the split path
(values compared outside the sandbox) and on the weak path (the same asserts behind a setup
line, run whole in the sandbox), each run serially (one at a time) and pooled (--workers at
once); the memory cap in use (cgroup or rlimit); and the slowdown of a batch of --batch programs
of which --hostile-fraction are hostile (infinite loop, fork bomb, memory bomb, cycled) under a
--hostile-wall-seconds limit, against the same batch all benign: the ratio of batch wall times.

    python benchmarks/sandbox.py [--serial 20] [--pooled 128] [--workers 16] [--batch 64]
                                 [--hostile-fraction 0.1] [--hostile-wall-seconds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from concurrent.futures import ThreadPoolExecutor

from rlvr.rewards.code import CodeTests
from rlvr.rewards.sandbox import Limits, Sandbox
from rlvr.types import Problem

TRIVIAL = "print('hello')\n"
SUITE = Problem(
    id="clamp",
    prompt="Write clamp(x, lo, hi).",
    metadata={
        "tests": [
            "assert clamp(5, 0, 10) == 5",
            "assert clamp(-3, 0, 10) == 0",
            "assert clamp(12, 0, 10) == 10",
            "assert clamp(0, 0, 10) == 0",
            "assert clamp(10, 0, 10) == 10",
            "assert clamp(2.5, 0, 3) == 2.5",
            "assert clamp(-1, -5, -2) == -2",
            "assert clamp(7, 7, 7) == 7",
            "assert [clamp(i, 2, 4) for i in range(6)] == [2, 2, 2, 3, 4, 4]",
            "assert clamp(10**20, 0, 1) == 1",
        ]
    },
)
# The same checks behind a setup line, which keeps them from being split.
WEAK_SUITE = Problem(
    id="clamp-weak",
    prompt=SUITE.prompt,
    metadata={"tests": ["lo, hi = 0, 10\n" + test for test in SUITE.metadata["tests"]]},
)
SOLUTION = "```python\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n```"
HOSTILE = {
    "infinite_loop": "while True:\n    pass\n",
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory_bomb": "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 24))\n",
}


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 2)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def executions_per_second(run_one, serial: int, pooled: int, workers: int) -> dict:
    """run_one() performs one execution; serially, then `pooled` of them on `workers` threads."""
    run_one()  # warm the page cache and the interpreter's imports
    serial_seconds = timed(lambda: [run_one() for _ in range(serial)])
    with ThreadPoolExecutor(workers) as pool:
        pooled_seconds = timed(lambda: list(pool.map(lambda _: run_one(), range(pooled))))
    return {"serial": rate(serial, serial_seconds), "pooled": rate(pooled, pooled_seconds)}


def batch_seconds(sandbox: Sandbox, programs: list[str], limits: Limits) -> float:
    def run_all():
        futures = [sandbox.submit(sandbox.run_python, code, "", limits) for code in programs]
        results = [f.result() for f in futures]
        assert not any(r.error for r in results), [r.error for r in results if r.error]

    return timed(run_all)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serial", type=int, default=20, help="executions run one at a time")
    parser.add_argument("--pooled", type=int, default=128, help="executions run on the pool")
    parser.add_argument("--workers", type=int, default=16, help="pool size")
    parser.add_argument("--batch", type=int, default=64, help="programs in the mixed batch")
    parser.add_argument("--hostile-fraction", type=float, default=0.1)
    parser.add_argument("--hostile-wall-seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    if min(args.serial, args.pooled, args.workers, args.batch) < 1:
        parser.error("--serial, --pooled, --workers and --batch must be >= 1")
    if not 0 < args.hostile_fraction <= 1:
        parser.error("--hostile-fraction must be in (0, 1]")

    result = {
        "benchmark": "sandbox",
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "load_avg_1m_before": round(os.getloadavg()[0], 2),  # > cpus: other work shares the CPUs
        "machine": platform.platform(),
        "as_root": os.geteuid() == 0,
    }
    sandbox = Sandbox(workers=args.workers)
    reward = CodeTests(CodeTests.Params(workers=args.workers))
    try:
        assert sandbox.run_python(TRIVIAL).stdout == "hello\n"
        assert reward(SUITE, SOLUTION).info["weak_tests"] == 0
        assert reward(WEAK_SUITE, SOLUTION).info["weak_tests"] == len(WEAK_SUITE.metadata["tests"])
        assert reward(SUITE, SOLUTION).value == reward(WEAK_SUITE, SOLUTION).value == 1.0
        result["memory_cap"] = sandbox.memory_cap

        result["trivial_executions_per_sec"] = executions_per_second(
            lambda: sandbox.run_python(TRIVIAL), args.serial, args.pooled, args.workers
        )
        result["assert_suite_executions_per_sec"] = executions_per_second(
            lambda: reward(SUITE, SOLUTION), args.serial, args.pooled, args.workers
        )
        result["weak_assert_suite_executions_per_sec"] = executions_per_second(
            lambda: reward(WEAK_SUITE, SOLUTION), args.serial, args.pooled, args.workers
        )

        limits = Limits(wall_seconds=args.hostile_wall_seconds)
        hostile_count = max(1, round(args.batch * args.hostile_fraction))
        kinds = list(HOSTILE.values())
        hostile = [kinds[i % len(kinds)] for i in range(hostile_count)]
        mixed = hostile + [TRIVIAL] * (args.batch - hostile_count)
        random.Random(0).shuffle(mixed)  # hostile ones spread through the queue, as in training
        benign = batch_seconds(sandbox, [TRIVIAL] * args.batch, limits)
        with_hostile = batch_seconds(sandbox, mixed, limits)
        result["mixed_batch"] = {
            "programs": args.batch,
            "hostile": hostile_count,
            "hostile_kinds": list(HOSTILE),
            "hostile_wall_seconds": args.hostile_wall_seconds,
            "benign_seconds": round(benign, 3),
            "with_hostile_seconds": round(with_hostile, 3),
            "slowdown": round(with_hostile / benign, 2),
        }
    finally:
        sandbox.close()
        reward.sandbox.close()
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
