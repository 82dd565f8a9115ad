"""RGPO (arXiv 2610.07342) against plain GRPO on the default task: same warm start, budget and
seeds; do hinted re-rollouts of failed groups raise unhinted accuracy?

Both arms use examples/recipes/rgpo.toml's settings; GRPO turns it off (methods.rgpo=null).

Prints one JSON object: per arm and seed, held-out greedy accuracy and pass@1 along the run
(never hinted), the share of groups hinted and rescued, the hinted re-rollouts' accuracy beside
the unhinted training accuracy (whether the hint helps this model at all), the mean imitation
NLL, wall seconds; with the CPU, date and versions.

    python benchmarks/methods/rgpo.py [--steps 30] [--eval-every 10] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "rgpo.toml"
ARMS = {"grpo": ["methods.rgpo=null"], "rgpo": []}


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        f"model.name={model}", *ARMS[name],
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    final = arm.summary["final_eval"]
    return {
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        "final_accuracy": final["eval/accuracy"],
        "final_pass@1": final["eval/pass@1"],
        "mean_train_accuracy": arm.mean("accuracy"),
        "mean_hinted_groups": arm.mean("rgpo/hinted_groups"),
        "mean_rescued_groups": arm.mean("rgpo/rescued_groups"),
        "mean_revised_accuracy": arm.mean("rgpo/revised_accuracy"),
        "mean_imitated": arm.mean("rgpo/imitated"),
        "mean_imitation_nll": arm.mean("rgpo/imitation_nll"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(
        ARMS, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, model)
    )
    report("rgpo", RECIPE, arms, task="arithmetic (default)", steps=args.steps)


if __name__ == "__main__":
    main()
