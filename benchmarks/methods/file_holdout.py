"""A small file of one's own (examples/jsonl.toml: 40 arithmetic word problems, 8 held out for
eval): does holding rows out of the tiny model's warm start, and stopping it on their loss,
give RL a better base than a warm start that cycles through every row for all its steps?

Two arms per seed, the same RL settings (the example's 30 steps of 64 rollouts): `holdout`
(model.pretrain_holdout = 0.1, the default: 3 rows kept out, their loss measured every 25
steps, stopped after 4 measurements without a new best) and `all_rows` (pretrain_holdout = 0).

Prints one JSON object: per arm and seed, the warm start's steps and held-out losses, the base
and final held-out greedy accuracy, pass@1 and pass@k, wall seconds; with the CPU, date and
versions.

    python benchmarks/methods/file_holdout.py [--steps 30] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlvr.train.warmstart import WARM_START_LOG, warm_start_path

from runs import report, run_all, train_arm

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "jsonl.toml"
ARMS = {"holdout": [], "all_rows": ["model.pretrain_holdout=0"]}


def run_arm(name: str, seed: int, args, run_dir: str) -> dict:
    arm = train_arm(RECIPE, [
        *ARMS[name], f"train.steps={args.steps}", "train.eval_every=10", f"train.seed={seed}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    trainer = arm.trainer
    warm_start = warm_start_path(trainer.cfg, trainer.components.task) / WARM_START_LOG
    log = json.loads(warm_start.read_text())
    base, final = arm.summary["base_eval"], arm.summary["final_eval"]
    k = trainer.cfg.train.eval_k
    return {
        "warm_start_steps": log["steps"],
        "held_out_rows": log["held_out_rows"],
        "held_out_loss": log["held_out_loss"],
        "warm_start_final_train_loss": round(log["loss"], 4),
        **{f"base_{key}": base[f"eval/{key}"] for key in ("accuracy", "pass@1", f"pass@{k}")},
        **{f"final_{key}": final[f"eval/{key}"] for key in ("accuracy", "pass@1", f"pass@{k}")},
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    arms = run_all(ARMS, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir))
    report("file_holdout", RECIPE, arms, task="jsonl (examples/data/arithmetic_word.jsonl)",
           steps=args.steps)  # fmt: skip


if __name__ == "__main__":
    main()
