"""MADA-RL (arXiv 2607.18006): does a critic trained with the counterfactual advantage (its
reward minus the mean reward of the generator answers it was shown) fix more of the
generators' wrong consensus than a critic trained with plain GRPO?

On the default task: the recipe's warm start (seed 0, half its demonstrations in the critic's
layout) is the frozen base of both LoRA adapters. Arms, same budget: `counterfactual` (MADA's
critic) and `grpo` (the critic's own group mean and std as its baseline); the generator trains
with GRPO in both. The debate's held-out eval shows the critic 3 generator samples of each of
the 200 problems and reads its greedy answer: `fixed` is its accuracy where most shown answers
were wrong, `kept` where most were right. At the recipe's LoRA learning rate (1e-3) both
critics learn to carry on their own within 2 steps and both end at the ceiling, so the arms
train at --lr (2e-4 by default), where how fast each critic learns to fix shows.

Prints one JSON object: per arm and seed, the debate eval at the start and by step, the
training steps' mean fixed rate over the last 10 steps, the generator's own final eval, wall
seconds; with the CPU, date and versions.

    python benchmarks/methods/mada.py [--steps 20] [--eval-every 5] [--lr 2e-4] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from rlvr.config import load_config
from rlvr.methods.debate import Debate

from runs import report, run_all, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "mada_rl.toml"
ARMS = {"counterfactual": [], "grpo": ['debate.critic={"algo.advantage": "grpo"}']}
KEYS = ("generator_accuracy", "critic_accuracy", "fixed", "kept", "wrong_consensus")


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    overrides = [
        f"model.name={model}", *ARMS[name], f"train.steps={args.steps}", f"train.lr={args.lr}",
        f"train.eval_every={args.eval_every}", f"train.seed={seed}", "train.save_every=0",
        f"log.run_dir={run_dir}", f"log.name={name}-{seed}", "log.quiet=true",
    ]  # fmt: skip
    start = time.perf_counter()
    summary = Debate(load_config(RECIPE, overrides)).run()
    wall = time.perf_counter() - start
    log = [json.loads(line) for line in Path(run_dir, f"{name}-{seed}", "debate.jsonl").open()]
    evals = {r["step"]: r for r in log if "debate/eval_fixed" in r}
    steps = [r for r in log if "debate/fixed" in r]

    def last_mean(key: str) -> float:
        values = [r[key] for r in steps[-10:] if r[key] == r[key]]  # NaN: nothing to fix in it
        return round(statistics.fmean(values), 4) if values else float("nan")

    generator = summary["roles"]["generator"]["final_eval"]
    return {
        "eval_by_step": {
            step: {k: round(r[f"debate/eval_{k}"], 4) for k in KEYS} for step, r in evals.items()
        },
        "train_last10": {k: last_mean(f"debate/{k}") for k in KEYS},
        "generator_final_greedy": generator["eval/accuracy"],
        "generator_final_pass@1": generator["eval/pass@1"],
        "wall_seconds": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(
        args.arms, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, model)
    )
    report("mada", RECIPE, arms, task="arithmetic (default)", steps=args.steps, lr=args.lr)


if __name__ == "__main__":
    main()
