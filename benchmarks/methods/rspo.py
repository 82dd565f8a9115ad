"""RSPO (arXiv 2607.04713) on a multi-turn game: does an explorer trained on process rewards,
whose replies join the main policy's outcome-rewarded batch, lift the main policy?

Every arm starts from one warm start of guess-the-number at 1..32 in 6 guesses
(examples/rspo.toml) and runs GRPO: on outcomes only (task.consistency_reward 0); on the
env's process rewards plus the outcome; and RSPO (the main policy on outcomes, its explorer on
process rewards, the explorer's replies replayed with token-level truncated importance weights).
Per arm and seed: held-out greedy success along the run, final pass@1 and turns per solved
game, the share of groups whose replies all scored alike (no GRPO signal), and seconds per step
(RSPO's covers both policies). Prints one JSON object with the CPU, date and versions.

    python benchmarks/methods/rspo.py [--steps 30] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rlvr.config import load_config
from rlvr.methods.rspo import RSPO
from rlvr.train.trainer import Trainer

from runs import report, run_all, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "rspo.toml"
ARMS = {
    "grpo_outcome": ["algo.rspo_explorer=false", "algo.tis=off", "task.consistency_reward=0"],
    "grpo_process": ["algo.rspo_explorer=false", "algo.tis=off"],
    "rspo": [],
}


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    cfg = load_config(RECIPE, [
        *ARMS[name], f"model.name={model}", f"train.steps={args.steps}", f"train.eval_every={args.eval_every}",
        f"train.seed={seed}", "train.save_every=0", f"log.run_dir={run_dir}",
        f"log.name={name}-{seed}", "log.quiet=true",
    ])  # fmt: skip
    group = RSPO(cfg) if cfg.algo.rspo_explorer else Trainer(cfg)
    start = time.perf_counter()
    summary = group.run()
    wall = time.perf_counter() - start
    main = group.members[0] if isinstance(group, RSPO) else group
    records = main.run_dir.read_metrics()
    steps = [r for r in records if "reward" in r]
    final = (summary["main"] if isinstance(group, RSPO) else summary)["final_eval"]
    return {
        "eval_success_by_step": {
            r["step"]: r["eval/accuracy"] for r in records if "eval/accuracy" in r
        },
        "final_pass@1": final.get("eval/pass@1"),
        "final_turns_per_solved": final.get("eval/turns_per_solved"),
        "uniform_groups": round(statistics.fmean(r["uniform_groups"] for r in steps), 4),
        "train_success_last5": round(statistics.fmean(r["accuracy"] for r in steps[-5:]), 4),
        "explorer_success": round(statistics.fmean(r["rspo/explorer_accuracy"] for r in steps), 4)
        if name == "rspo"
        else None,
        "seconds_per_step": round(wall / args.steps, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("arms", nargs="*", default=list(ARMS))
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(args.arms, args.seeds, lambda arm, seed, d: run_arm(arm, seed, args, d, model))
    report("rspo", RECIPE, arms, steps=args.steps)


if __name__ == "__main__":
    main()
