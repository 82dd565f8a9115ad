"""Synchronous against asynchronous RL on Ray: rollout on one core, training on the other.

Trains the default task from the same warm start and seed, with one rollout worker (one torch
thread) and the trainer (one torch thread) for each rollout.max_staleness in the list (0 is
the synchronous loop on the same layout), and for each staleness above 0 once more per
rollout.partial_tokens in --partial (partial rollouts). Prints one JSON object: per arm,
samples per second, seconds per step, wall seconds to the target greedy accuracy, final
accuracy, the idle ratios of trainer and rollout worker, for partial rollouts the share of
samples trained in another step than their own and their lengths; and the throughput ratios
against staleness 0.

    python benchmarks/async.py [--steps 30] [--eval-every 5] [--target 0.9] [--staleness 0 1 2]
                               [--partial 8]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import tempfile
import time

import torch
import transformers

from rlvr.config import load_config
from rlvr.train.trainer import Trainer


def cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def run(staleness: int, partial: int, steps: int, eval_every: int, target: float,
        run_dir: str) -> dict:  # fmt: skip
    overrides = [
        f"train.steps={steps}", f"train.eval_every={eval_every}", "train.save_every=0",
        f"log.run_dir={run_dir}", f"log.name=k{staleness}-p{partial}", "log.quiet=true",
        "distributed.backend=ray", "distributed.rollout_workers=1", "distributed.torch_threads=1",
        f"rollout.max_staleness={staleness}", "algo.tis=token", f"rollout.partial_tokens={partial}",
    ]  # fmt: skip
    trainer = Trainer(load_config(None, overrides))
    start = time.perf_counter()
    summary = trainer.run()
    wall = time.perf_counter() - start
    records = trainer.run_dir.read_metrics()
    steps_logged = [r for r in records if "loss" in r]
    reached = next(
        (r["step"] for r in records if r.get("eval/accuracy", 0.0) >= target and r["step"] > 0),
        None,
    )
    seconds_at = {r["step"]: sum(s["time/step"] for s in steps_logged if s["step"] <= r["step"])
                  for r in records if "eval/accuracy" in r}  # fmt: skip
    per_step = statistics.median(r["time/step"] for r in steps_logged[2:])

    def mean(key: str) -> float | None:
        values = [r[key] for r in steps_logged if key in r]
        return round(statistics.fmean(values), 3) if values else None

    partial_keys = ("carried_share", "early_share", "length_on_time", "length_carried",
                    "length_early", "accuracy_on_time", "accuracy_carried", "accuracy_early")  # fmt: skip
    return {
        "base_accuracy": summary["base_eval"]["eval/accuracy"],
        "final_accuracy": summary["final_eval"]["eval/accuracy"],
        "seconds_per_step_median": round(per_step, 3),
        "samples_per_second": round(trainer.cfg.rollout.batch_size / per_step, 1),
        "step_reaching_target": reached,
        "train_seconds_to_target": None if reached is None else round(seconds_at[reached], 1),
        "trainer_idle_ratio": round(
            statistics.fmean(r["trainer/idle_ratio"] for r in steps_logged), 3
        ),
        "rollouter_idle_ratio": round(
            statistics.fmean(r["rollouter/idle_ratio"] for r in steps_logged), 3
        ),
        "staleness_mean": statistics.fmean(r["async/staleness_mean"] for r in steps_logged),
        "mixed_versions": mean("async/mixed_versions"),
        **({k: mean(f"rollout/{k}") for k in partial_keys} if partial else {}),
        "wall_seconds": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--partial", type=int, nargs="*", default=[],
                        help="rollout.partial_tokens values to run beside each staleness > 0")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)  # the trainer's core; the rollout worker has the other
    arms = [(k, 0) for k in args.staleness]
    arms += [(k, p) for k in args.staleness if k for p in args.partial]
    results = {}
    with tempfile.TemporaryDirectory() as run_dir:
        for k, p in arms:
            name = f"staleness_{k}" + (f"_partial_{p}" if p else "")
            results[name] = run(k, p, args.steps, args.eval_every, args.target, run_dir)
    sync = results.get("staleness_0")
    if sync:
        for name, r in results.items():
            if name != "staleness_0":
                r["throughput_vs_sync"] = round(
                    r["samples_per_second"] / sync["samples_per_second"], 2
                )
    print(json.dumps({
        "benchmark": "async", "cpu": cpu_model(), "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "ray": __import__("ray").__version__, "steps": args.steps, "target": args.target,
        "results": results,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
