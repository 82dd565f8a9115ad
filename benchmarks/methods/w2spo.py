"""W2SPO (arXiv 2607.16205) against GRPO from a policy stuck in a wrong basin.

The policy's warm start always drops carries (examples/recipes/w2spo.toml), so its own samples
are right only where no carry is needed. The weak model is a shorter warm start that carries
(flawed share 0, --weak-steps steps). Both arms start from the same policy and use the recipe's
settings; the W2SPO arm adds methods.w2spo.model, so half its replies carry an 8-token weak
branch trained alone with capped importance weights.

Prints one JSON object: the weak model's held-out greedy accuracy, and per arm
and seed greedy accuracy and pass@1 along the run, the branched replies' accuracy against the
unbranched ones, wall seconds; with the CPU, date and versions.

    python benchmarks/methods/w2spo.py [--steps 30] [--seeds 0 1] [--weak-steps 300]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr.config import load_config
from rlvr.models.loading import load_model
from rlvr.rollout.build import make_runner
from rlvr.train.components import build_components
from rlvr.train.evaluate import evaluate

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "w2spo.toml"


def greedy_accuracy(path: str) -> float:
    """Held-out greedy accuracy of the model at `path` on the recipe's task."""
    cfg = load_config(RECIPE, [])
    components = build_components(cfg)
    model, tokenizer = load_model(path)
    runner = make_runner(cfg, model.eval(), tokenizer, components)
    return evaluate(runner, components.task.eval_problems(), 1, 0)["eval/accuracy"]


def run_arm(arm: str, seed: int, args, run_dir: str, policy: str, weak: str) -> dict:
    branch = [f"methods.w2spo.model={weak}"] if arm == "w2spo" else []
    result = train_arm(RECIPE, [
        f"model.name={policy}", *branch,
        f"train.steps={args.steps}", f"train.seed={seed}",
    ], run_dir, f"{arm}-{seed}")  # fmt: skip
    return {
        "eval_accuracy_by_step": result.by_step("eval/accuracy"),
        "eval_pass@1_by_step": result.by_step("eval/pass@1"),
        "final_accuracy": result.summary["final_eval"]["eval/accuracy"],
        "final_pass@1": result.summary["final_eval"]["eval/pass@1"],
        "train_accuracy_mean": result.mean("accuracy"),
        "branched_accuracy_mean": result.mean("branch/accuracy"),
        "unbranched_accuracy_mean": result.mean("branch/unbranched_accuracy"),
        "wall_seconds": result.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--weak-steps", type=int, default=300)
    args = parser.parse_args()
    policy = warm_start(RECIPE, [])
    weak = warm_start(
        RECIPE, ["model.pretrain_flawed_share=0", f"model.pretrain_steps={args.weak_steps}"]
    )
    arms = run_all(
        ["grpo", "w2spo"], args.seeds,
        lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, policy, weak),
    )  # fmt: skip
    report(
        "w2spo", RECIPE, arms, task="arithmetic (default), policy always drops carries",
        steps=args.steps, weak_steps=args.weak_steps,
        weak_greedy_accuracy=greedy_accuracy(weak),
    )  # fmt: skip


if __name__ == "__main__":
    main()
