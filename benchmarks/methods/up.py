"""UP (arXiv 2607.06987) against GRPO's clipped loss on the default task, two seeds.

Both arms start from the default seed-0 warm start (a seed varies only the RL run) and use
examples/recipes/up.toml's settings (GRPO advantages, token-mean, clip 0.2, two minibatches so
that the second optimizer step of each batch is off-policy and a clip can bind); they differ
only in algo.loss: ppo_clip, or up (positive advantages unclipped through the self-anchored
ratio, negative ones clipped and dual-clipped at 3 |A|).

Prints one JSON object: per arm and seed, held-out greedy accuracy and pass@1 along the run,
the first eval step at >= 0.9, the mean clip fractions and per-token entropy of the updates,
wall seconds; with the CPU, date and versions.

    python benchmarks/methods/up.py [--steps 30] [--eval-every 5] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "up.toml"
ARMS = {"ppo_clip": ["algo.loss=ppo_clip", "algo.loss_params={}"], "up": []}


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        f"model.name={model}", *ARMS[name],
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    accuracy = arm.by_step("eval/accuracy")
    steps = [r for r in arm.records if "reward" in r]
    return {
        "eval_accuracy_by_step": accuracy,
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        "first_eval_step_at_0.9": next((s for s, a in accuracy.items() if s and a >= 0.9), None),
        "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
        "final_pass@1": arm.summary["final_eval"]["eval/pass@1"],
        "mean_clip_frac": arm.mean("clip_frac"),
        "mean_dual_clip_frac": arm.mean("dual_clip_frac"),
        "mean_entropy": arm.mean("entropy"),
        "entropy_last5": round(statistics.fmean(r["entropy"] for r in steps[-5:]), 4),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(
        ARMS, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, model)
    )
    report("up", RECIPE, arms, task="arithmetic (default)", steps=args.steps)


if __name__ == "__main__":
    main()
