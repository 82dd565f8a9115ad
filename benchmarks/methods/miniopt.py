"""MiniOpt (arXiv 2606.25832): GRPO on the tiny integer-LP task with the summed OptReward.

Every seed starts from the recipe's seed-0 warm start (a seed varies only the RL run): replies
name the five elements in <think> and answer with a one-line program, and 60% of the
demonstrations leave the last constraint out of it. The spec's check is that the reward rises
during GRPO; this also reports each of its terms (format, elements, answer) over the first and
last steps, and held-out accuracy (the program's printed objective equals scipy's optimum).

Prints one JSON object: per seed, the train reward and its terms by step, held-out accuracy
and pass@1 along the run, wall seconds; with the CPU, date and versions.

    python benchmarks/methods/miniopt.py [--steps 30] [--eval-every 10] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "miniopt.toml"
TERMS = ("reward", "reward/format", "reward/elements", "reward/answer", "accuracy")


def window(steps: list[dict], key: str) -> float:
    return round(statistics.fmean(r[key] for r in steps), 4)


def run_arm(seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        f"model.name={model}",
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"miniopt-{seed}")  # fmt: skip
    steps = [r for r in arm.records if "reward" in r]
    return {
        "first_5_steps": {key: window(steps[:5], key) for key in TERMS},
        "last_5_steps": {key: window(steps[-5:], key) for key in TERMS},
        "reward_by_step": arm.by_step("reward"),
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
        "final_pass@1": arm.summary["final_eval"]["eval/pass@1"],
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
        ["grpo"], args.seeds, lambda _, seed, run_dir: run_arm(seed, args, run_dir, model)
    )
    report("miniopt", RECIPE, arms, task="linear_program (2 constraints)", steps=args.steps)


if __name__ == "__main__":
    main()
