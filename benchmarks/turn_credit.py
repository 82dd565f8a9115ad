"""Multi-turn credit on guess-the-number: terminal, delayed and per-turn rewards, mt_grpo, and
tree rollouts, each trained from the same warm start with the same seed and step budget.

Prints one JSON object: per variant, held-out greedy success (base and final), turns per
solved game, pass@1, episodes per step, generated tokens per step, and wall seconds of RL.

    python benchmarks/turn_credit.py [--steps 30] [--eval-every 10] [name ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from rlvr.config import load_config
from rlvr.train.trainer import Trainer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "guess_number.toml"
VARIANTS: dict[str, list[str]] = {
    "terminal": ["algo.reward_timing=terminal"],
    "delayed": ["algo.reward_timing=delayed"],
    "per_turn": ["algo.reward_timing=per_turn"],
    "per_turn_mt_grpo": ["algo.reward_timing=per_turn", "algo.advantage=mt_grpo"],
    "per_turn_gae": ["algo.reward_timing=per_turn", "algo.advantage=gae", "algo.gamma=1.0"],
    "tree": ["algo.reward_timing=terminal", "algo.advantage=tree", "rollout.tree_width=2"],
}


def run_variant(name: str, run_dir: str, steps: int, eval_every: int) -> dict:
    overrides = [
        f"train.steps={steps}", f"train.eval_every={eval_every}", "train.save_every=0",
        f"log.run_dir={run_dir}", f"log.name={name}", "log.quiet=true", *VARIANTS[name],
    ]  # fmt: skip
    trainer = Trainer(load_config(EXAMPLE, overrides))
    start = time.perf_counter()
    summary = trainer.run()
    steps_logged = [r for r in trainer.run_dir.read_metrics() if "reward" in r]
    base, final = summary["base_eval"], summary["final_eval"]
    return {
        "base_success": base["eval/accuracy"],
        "final_success": final["eval/accuracy"],
        "base_turns_per_solved": base.get("eval/turns_per_solved"),
        "final_turns_per_solved": final.get("eval/turns_per_solved"),
        "final_pass@1": final.get("eval/pass@1"),
        "train_success_last5": round(statistics.fmean(r["accuracy"] for r in steps_logged[-5:]), 3),
        "generated_tokens_per_step": round(
            statistics.fmean(r["response_length"] for r in steps_logged)
            * trainer.cfg.rollout.batch_size
        ),
        "wall_seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"variants (default: all of {list(VARIANTS)})")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as run_dir:
        for name in args.names or VARIANTS:
            results[name] = run_variant(name, run_dir, args.steps, args.eval_every)
    print(json.dumps({"benchmark": "turn_credit", "steps": args.steps, "variants": results}))


if __name__ == "__main__":
    main()
