"""SAO (examples/recipes/sao.toml) trained synchronously and asynchronously, on seeds 0-2.

Three arms, each from the same warm start with one rollout per prompt:
  local      the synchronous loop in this process (distributed.backend=local)
  ray_sync   two Ray rollout workers, rollout.max_staleness=0 (the same schedule, on Ray)
  ray_async  two Ray rollout workers, rollout.max_staleness=1 and partial rollouts
             (rollout.partial_tokens): a step trains the oldest samples to finish, sampled by
             the weights of one or more earlier versions; dis weighs each token by its
             engine logprob, so no algo.tis is added (it would weigh twice)

Prints one JSON object: per arm and seed, greedy eval accuracy before and after, train samples
per second (samples / the steps' summed wall seconds, evaluation excluded), the staleness and
the share of samples written by several versions, the share of tokens dis masked, the
trainer's idle ratio; with the CPU, date and versions. Ray starts once for all runs.

    OMP_NUM_THREADS=1 python benchmarks/methods/sao_async.py [--steps 10] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import ray
from machine import machine

from rlvr.config import load_config
from rlvr.train.trainer import Trainer

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "sao.toml"
RAY = ["distributed.backend=ray", "distributed.rollout_workers=2"]
ARMS: dict[str, list[str]] = {
    "local": [],
    "ray_sync": RAY,
    "ray_async": [*RAY, "rollout.max_staleness=1", "rollout.partial_tokens=8"],
}


def run(arm: str, seed: int, args, run_dir: str) -> dict:
    cfg = load_config(RECIPE, [
        *ARMS[arm], f"train.seed={seed}", f"train.steps={args.steps}",
        f"rollout.batch_size={args.batch_size}", f"algo.critic_warmup_steps={args.warmup}",
        "train.eval_every=0", "train.eval_k=1", "train.save_every=0", "log.quiet=true",
        "log.report=false", f"log.run_dir={run_dir}", f"log.name={arm}-{seed}",
    ])  # fmt: skip
    trainer = Trainer(cfg)
    summary = trainer.run()
    steps = [r for r in trainer.run_dir.read_metrics() if "reward" in r]

    def mean(key: str) -> float | None:
        values = [r[key] for r in steps if key in r]
        return round(statistics.fmean(values), 4) if values else None

    seconds = sum(r["time/step"] for r in steps)
    return {
        "base_accuracy": summary["base_eval"]["eval/accuracy"],
        "final_accuracy": summary["final_eval"]["eval/accuracy"],
        "samples_per_second": round(len(steps) * args.batch_size / seconds, 2),
        "step_seconds": round(seconds, 1),
        "staleness_mean": mean("async/staleness_mean"),
        "mixed_versions": mean("async/mixed_versions"),
        "dis_mask_frac": mean("mask_frac"),
        "trainer_idle_ratio": mean("trainer/idle_ratio"),
        "train_reward_last3": round(statistics.fmean(r["reward"] for r in steps[-3:]), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="*", help=f"arms (default: all of {list(ARMS)})")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2, help="critic-only warm-up steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    results: dict[str, dict] = {}
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as run_dir:
            for arm in args.arms or ARMS:
                per_seed = {seed: run(arm, seed, args, run_dir) for seed in args.seeds}
                results[arm] = {
                    "per_seed": per_seed,
                    "mean_samples_per_second": round(
                        statistics.fmean(r["samples_per_second"] for r in per_seed.values()), 2
                    ),
                    "mean_final_accuracy": round(
                        statistics.fmean(r["final_accuracy"] for r in per_seed.values()), 3
                    ),
                }
    finally:
        ray.shutdown()
    print(json.dumps({
        "benchmark": "methods/sao_async",
        "recipe": "examples/recipes/sao.toml, rollout.group_size=1",
        "steps": args.steps, "batch_size": args.batch_size, "critic_warmup_steps": args.warmup,
        "arms": results, **machine(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
