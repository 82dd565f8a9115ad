"""Every recipe in examples/recipes/ on the default task, same seed and budget, side by side.

Prints one JSON object: per recipe, the first step whose held-out greedy accuracy reached the
threshold, base and final accuracy, pass@k, wall seconds of RL, and the mean KL to the
reference where the recipe has one. The warm-started tiny model is built once and shared.

    python benchmarks/recipes.py [--steps 60] [--eval-every 10] [--threshold 0.9] [name ...]
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

RECIPES = Path(__file__).resolve().parents[1] / "examples" / "recipes"
# Recipes whose models the user makes first (their comments say how): run only when named, with
# those models at the paths the recipe reads.
MODELS_FIRST = {"direct_opd"}


def run_recipe(path: Path, run_dir: str, steps: int, eval_every: int, threshold: float) -> dict:
    overrides = [
        f"train.steps={steps}", f"train.eval_every={eval_every}", "train.save_every=0",
        f"log.run_dir={run_dir}", f"log.name={path.stem}", "log.quiet=true",
    ]  # fmt: skip
    trainer = Trainer(load_config(path, overrides))
    start = time.perf_counter()
    summary = trainer.run()
    records = trainer.run_dir.read_metrics()
    evals = [r for r in records if "eval/accuracy" in r and r["step"] > 0]
    reached = next((r["step"] for r in evals if r["eval/accuracy"] >= threshold), None)
    kls = [r["kl"] for r in records if "kl" in r]
    final = summary["final_eval"]
    return {
        "steps_to_threshold": reached,
        "base_accuracy": summary["base_eval"]["eval/accuracy"],
        "final_accuracy": final["eval/accuracy"],
        "final_pass@1": final.get("eval/pass@1"),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "mean_kl": round(statistics.fmean(kls), 5) if kls else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="recipe names (default: all)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--threshold", type=float, default=0.9)
    args = parser.parse_args()
    paths = sorted(RECIPES.glob("*.toml"))
    if args.names:
        paths = [p for p in paths if p.stem in args.names]
    else:
        paths = [p for p in paths if p.stem not in MODELS_FIRST]
    results = {}
    with tempfile.TemporaryDirectory() as run_dir:
        for path in paths:
            results[path.stem] = run_recipe(
                path, run_dir, args.steps, args.eval_every, args.threshold
            )
    print(json.dumps({"benchmark": "recipes", "steps": args.steps, "threshold": args.threshold,
                      "recipes": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
