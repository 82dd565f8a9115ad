"""SAO (arXiv 2607.07508) on the default task with one rollout per prompt (rollout.group_size=1).

Three arms from the same warm start, seed and step budget:
  grpo          GRPO's advantage with groups of one: every advantage is 0, so nothing can
                learn. The trainer refuses grpo with group_size 1 up front; this arm runs the
                same function through a `module:attr` path without that guard, to show it.
  running_mean  A = r - b, b a moving average of earlier steps' rewards, with ppo_clip
                (the weak baseline the SAO paper's value model has to beat).
  sao           examples/recipes/sao.toml: GAE from a critic with the length-adaptive policy
                lambda, DIS, two critic passes per update, frozen critic attention, warm-up.

Prints one JSON object: per arm, greedy eval accuracy before / after and every eval_every
steps, the first of those steps at >= 0.9 (and how many of the steps before it updated the
policy: sao's first steps fit only its critic), train reward of the first and last 5 steps,
the largest change of any policy weight, wall seconds; with the CPU, date and versions.

    python benchmarks/methods/sao.py [--steps 30] [--batch-size 32] [--eval-every 2] [arm ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from machine import machine

from rlvr.algos.advantages import AdvInputs, grpo
from rlvr.config import AlgoConfig, ConfigError, load_config
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer

THRESHOLD = 0.9
RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "sao.toml"


def grpo_one_rollout(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """grpo without its group-size guard: with one rollout per prompt every advantage is 0."""
    return grpo(inputs, algo)


ARMS: dict[str, tuple[Path | None, list[str]]] = {
    "grpo": (None, [f"algo.advantage={__name__}:grpo_one_rollout", "algo.loss=ppo_clip"]),
    "running_mean": (None, ["algo.advantage=running_mean", "algo.loss=ppo_clip"]),
    "sao": (RECIPE, []),
}


def common(args, run_dir: str, name: str) -> list[str]:
    return [
        "rollout.group_size=1", f"rollout.batch_size={args.batch_size}",
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", "train.eval_k=1",
        "train.save_every=0", f"log.run_dir={run_dir}", f"log.name={name}", "log.quiet=true",
    ]  # fmt: skip


def run_arm(name: str, args, run_dir: str) -> dict:
    path, overrides = ARMS[name]
    trainer = Trainer(load_config(path, [*common(args, run_dir, name), *overrides]))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    start = time.perf_counter()
    summary = trainer.run()
    wall = time.perf_counter() - start
    moved = max(float((p - q).abs().max()) for p, q in zip(before, trainer.model.parameters()))
    records = trainer.run_dir.read_metrics()
    steps = [r for r in records if "reward" in r]
    evals = {r["step"]: r["eval/accuracy"] for r in records if "eval/accuracy" in r}
    reached = next((step for step, acc in evals.items() if step and acc >= THRESHOLD), None)
    warmup = trainer.cfg.algo.critic_warmup_steps if trainer.critic is not None else 0

    def mean(key: str) -> float | None:
        values = [r[key] for r in steps if key in r]
        return round(statistics.fmean(values), 4) if values else None

    return {
        "base_accuracy": summary["base_eval"]["eval/accuracy"],
        "final_accuracy": summary["final_eval"]["eval/accuracy"],
        "eval_accuracy_by_step": evals,
        "first_eval_step_at_0.9": reached,
        "policy_updates_before_it": None if reached is None else max(reached - warmup, 0),
        "train_reward_first5": round(statistics.fmean(r["reward"] for r in steps[:5]), 3),
        "train_reward_last5": round(statistics.fmean(r["reward"] for r in steps[-5:]), 3),
        "policy_max_abs_weight_change": moved,
        "mean_clip_frac": mean("clip_frac"),
        "mean_dis_mask_frac": mean("mask_frac"),
        "mean_critic_value_loss": mean("critic/value_loss"),
        "steps": len(steps),
        "wall_seconds": round(wall, 1),
    }


def grpo_refusal(args, run_dir: str) -> str | None:
    """What the trainer says to plain grpo with one rollout per prompt."""
    try:
        build_components(
            load_config(None, [*common(args, run_dir, "refused"), "algo.advantage=grpo"])
        )
    except ConfigError as e:
        return str(e)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="*", help=f"arms (default: all of {list(ARMS)})")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=2)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as run_dir:
        refusal = grpo_refusal(args, run_dir)
        for name in args.arms or ARMS:
            results[name] = run_arm(name, args, run_dir)
    print(
        json.dumps(
            {
                "benchmark": "methods/sao",
                "task": "arithmetic (default), rollout.group_size=1",
                "steps": args.steps,
                "batch_size": args.batch_size,
                "grpo_group_size_1_refused_with": refusal,
                "arms": results,
                **machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
