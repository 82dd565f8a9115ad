"""RepExp (arXiv 2510.11686): GRPO with and without the elliptical exploration bonus on the
default task, same warm start, budget and seeds; does pass@k at large k hold up better?

Arms differ only in methods.repexp.beta: off (plain GRPO), the paper's 0.01, and 0.1. Every arm
evaluates with eval_k samples per held-out problem, so pass@1 and pass@eval_k come from the
same seeded samples.

Prints one JSON object: per arm and seed, held-out greedy accuracy, pass@1 and pass@k along the
run, the mean per-token entropy and bonus of the updates, the share of groups the bonus reached,
wall seconds; with the CPU, date and versions.

    python benchmarks/methods/repexp.py [--steps 30] [--eval-every 10] [--eval-k 16] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "repexp.toml"
ARMS = {"grpo": 0.0, "repexp_0.01": 0.01, "repexp_0.1": 0.1}


def run_arm(beta: float, name: str, seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        f"model.name={model}", *([f"methods.repexp.beta={beta}"] if beta else ["methods.repexp=null"]), f"train.eval_k={args.eval_k}",
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    k, final = f"pass@{args.eval_k}", arm.summary["final_eval"]
    return {
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        f"eval_{k}_by_step": arm.by_step(f"eval/{k}"),
        "final_accuracy": final["eval/accuracy"],
        "final_pass@1": final["eval/pass@1"],
        f"final_{k}": final[f"eval/{k}"],
        "mean_entropy": arm.mean("entropy"),
        "mean_bonus": arm.mean("exploration/bonus"),
        "mean_bonus_groups": arm.mean("exploration/groups"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-k", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(
        ARMS,
        args.seeds,
        lambda arm, seed, run_dir: run_arm(ARMS[arm], arm, seed, args, run_dir, model),
    )
    report(
        "repexp", RECIPE, arms, task="arithmetic (default)", steps=args.steps, eval_k=args.eval_k
    )


if __name__ == "__main__":
    main()
