"""Seconds per RL step of the default config (what `rlvr train` with no arguments runs), by phase.

Builds a `Trainer` (the one-off warm start of the tiny model happens there and is not timed),
runs W warmup steps, then N measured steps, and prints one JSON object: mean seconds per step
for each phase the trainer's metrics report (rollout = generate + env/reward, old_logprobs,
ref_logprobs, update, total), generated and training tokens per second, peak RSS, torch threads
and the overrides used. Unless --no-compare is given, the same measurement is repeated with
`algo.kl_coef=0.05`, so the reference-model phase runs, and the ratios to the base are reported.

    python benchmarks/step_time.py [--steps 10] [--warmup 2] [--no-compare] [section.key=value ...]

Runs are written to a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import tempfile
import time

import torch

from rlvr.config import load_config
from rlvr.train.trainer import Trainer

PHASES = ("rollout", "generate", "env", "old_logprobs", "ref_logprobs", "update")
KL_OVERRIDE = "algo.kl_coef=0.05"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(overrides: list[str], steps: int, warmup: int) -> dict:
    """Mean seconds per step by phase (a phase that did not run counts 0) and token rates."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, [*overrides, f"log.run_dir={tmp}", "log.quiet=true"])
        start = time.perf_counter()
        trainer = Trainer(cfg)  # the tiny model's warm start (first use only) happens here
        setup = time.perf_counter() - start
        rows = []
        for i in range(warmup + steps):
            start = time.perf_counter()
            metrics = trainer.step()
            metrics["time/total"] = time.perf_counter() - start
            trainer.state["step"] += 1  # as Trainer.run does: the next step samples fresh tokens
            if i >= warmup:
                rows.append(metrics)
        del trainer
        gc.collect()

    def mean(key: str) -> float:
        return round(statistics.fmean(r.get(key, 0.0) for r in rows), 4)

    return {
        "overrides": overrides,
        "setup_seconds": round(setup, 2),
        "seconds_per_step": {p: mean(f"time/{p}") for p in (*PHASES, "total")},
        "tokens_per_sec": {k: round(mean(f"tokens_per_sec/{k}"), 1) for k in ("generate", "train")},
        "peak_rss_mib_so_far": round(peak_rss_mib(), 1),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="measured RL steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed RL steps before measuring")
    parser.add_argument("--no-compare", action="store_true", help=f"skip the {KL_OVERRIDE} run")
    parser.add_argument("overrides", nargs="*", help="config overrides, section.key=value")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")

    result = {
        "benchmark": "step_time",
        "steps": args.steps,
        "warmup": args.warmup,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_avg_1m_before": round(os.getloadavg()[0], 2),  # > cpus: other work shares the CPUs
        "torch": torch.__version__,
        "machine": platform.platform(),
        "base": measure(list(args.overrides), args.steps, args.warmup),
    }
    if not args.no_compare:
        kl = measure([*args.overrides, KL_OVERRIDE], args.steps, args.warmup)
        base, kls = result["base"]["seconds_per_step"], kl["seconds_per_step"]
        result["kl"] = kl
        result["kl_step_time_ratio"] = round(kls["total"] / base["total"], 3)
        result["kl_ref_logprobs_share"] = round(kls["ref_logprobs"] / kls["total"], 3)
        result["kl_update_time_ratio"] = round(kls["update"] / base["update"], 3)
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    result["peak_rss_mib"] = round(peak_rss_mib(), 1)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
