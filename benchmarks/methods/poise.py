"""POISE (arXiv 2605.07579) against RLOO at two samples per prompt on the default task.

Both arms start from the default seed-0 warm start and use examples/recipes/poise.toml's
settings (rollout.group_size=2, PPO clipped loss); they differ only in algo.advantage: rloo
(the other sample's reward as the baseline), or poise (the mean probe prediction of the other
sample, rloo during the first --bootstrap steps).

Prints one JSON object: per arm and seed, held-out greedy accuracy along the run, the final
accuracy, wall seconds, and for poise the probe's mean Brier skill and Pearson r and the mean
advantage variance of poise vs rloo on the same batches once the probe is on; with the CPU,
date and versions.

    python benchmarks/methods/poise.py [--steps 30] [--bootstrap 8] [--eval-every 10] [--seeds 0]
        [--batch-size 128] [--arms rloo poise]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "poise.toml"
ARMS = {"rloo": ["algo.advantage=rloo", "methods.poise=null"], "poise": []}


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        f"model.name={model}", *ARMS[name],
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", f"train.seed={seed}",
        f"methods.poise.bootstrap_steps={args.bootstrap}", f"rollout.batch_size={args.batch_size}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    probed = [r for r in arm.records if r.get("poise/fitted") == 1.0]  # after the bootstrap

    def mean(key: str) -> float | None:
        values = [r[key] for r in probed if key in r]
        return round(statistics.fmean(values), 4) if values else None

    out = {
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
        "mean_reward": arm.mean("reward"),
        "wall_seconds": arm.wall_seconds,
    }
    if name == "poise":
        out.update(
            probe_steps=len(probed), mean_skill=mean("poise/skill"),
            mean_pearson=mean("poise/pearson"), mean_adv_var=mean("poise/adv_var"),
            mean_rloo_adv_var=mean("poise/rloo_adv_var"),
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--bootstrap", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--batch-size", type=int, default=128, help="rollouts per step")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(
        args.arms, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, model)
    )
    report(
        "poise",
        RECIPE,
        arms,
        task="arithmetic (default)",
        steps=args.steps,
        bootstrap_steps=args.bootstrap,
        batch_size=args.batch_size,
    )


if __name__ == "__main__":
    main()
