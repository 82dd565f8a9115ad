"""3PO / C3PO (arXiv 2608.09805): does sampling each group's replies from a few weight draws
around the LoRA adapters leave fewer groups without a learning signal than GRPO at the same
budget, and what does it do to accuracy?

Every arm runs examples/recipes/c3po.toml (GRPO on rank-8 LoRA adapters, lr 1e-3) from the
seed-0 warm start of the default task. `grpo`: no weight noise (methods.c3po=null, no IS
mask). `c3po`: 2 weight draws per step, each sampling half of every group, trained through the
sequence-level IS mask [0.5, 2]. `c3po_n4`: 4 draws of 2 replies each.

Prints one JSON object: per arm and seed, the share of uniform groups (every reply scored
alike) over the run, held-out greedy accuracy and pass@1 along the run, the share of policy
tokens the IS mask dropped, the posterior's mean sigma, seconds per step and wall seconds; with
the CPU, date and versions.

    python benchmarks/methods/c3po.py [--steps 30] [--eval-every 10] [--seeds 0 1]
        [--arms grpo c3po c3po_n4] [--ess 1e5] [--floor 0.1]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "c3po.toml"
ARMS = {
    "grpo": ["methods.c3po=null", "algo.tis=off"],  # after the noise keys: it drops them too
    "c3po": [],
    "c3po_n4": ["methods.c3po.weight_samples=4"],
}


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    noise = [f"methods.c3po.ess={args.ess}", f"methods.c3po.floor={args.floor}"]
    arm = train_arm(RECIPE, [
        f"model.name={model}", *noise, *ARMS[name], f"train.steps={args.steps}",
        f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    steps = [r for r in arm.records if "reward" in r]
    return {
        "uniform_groups": arm.mean("uniform_groups"),
        "uniform_groups_first_10": round(
            statistics.fmean(r["uniform_groups"] for r in steps[:10]), 4
        ),
        "train_accuracy": arm.mean("accuracy"),
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
        "final_pass@1": arm.summary["final_eval"]["eval/pass@1"],
        "masked_share": arm.mean("mismatch/masked_share"),
        "abs_logprob_diff": arm.mean("mismatch/abs_diff_mean"),
        "sigma_mean": arm.mean("rollout/weight_sigma_mean"),
        "seconds_per_step": arm.mean("time/step"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--ess", type=float, default=1e5)
    parser.add_argument("--floor", type=float, default=0.1)
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(
        args.arms, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, model)
    )
    report("c3po", RECIPE, arms, steps=args.steps, ess=args.ess, floor=args.floor)


if __name__ == "__main__":
    main()
