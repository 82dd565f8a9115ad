"""RFPO (arXiv 2609.37119): once the critic is frozen and judges every reply, does PPO keep the
accuracy it reaches on the verifier's rewards, and what does a step cost?

Every arm runs examples/recipes/rfpo.toml's PPO (gae with gamma = lam = 1, critic warm-up 5
steps) from the seed-0 warm start, on the default task or (`--task target_string`) on saying
"hello", whose success a critic can read off the reply itself. `verifier`: the verifier rewards
every step (RFPO off). `rfpo`: after 10 label steps the critic is calibrated on 512 held-out replies,
frozen, and its verdict is the only reward (p = 0). `rfpo_p25`: the same, with a quarter of the
replies still on the verifier.

Prints one JSON object: per arm and seed, held-out greedy accuracy and pass@1 along the run,
the calibration's agreement with the verifier, the verdicts' agreement on the judged training
batches, mean seconds per step before and after the switch, wall seconds; with the CPU, date
and versions.

    python benchmarks/methods/rfpo.py [--task arithmetic] [--steps 30] [--eval-every 5]
        [--seeds 0 1] [--arms verifier rfpo rfpo_p25]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "rfpo.toml"
ARMS = {
    "verifier": ["methods.rfpo=null"],
    "rfpo": [],
    "rfpo_p25": ["methods.rfpo.label_share=0.25"],
}
SWITCH = 10  # the recipe's methods.rfpo.label_steps
TASKS = {  # the default task, and one whose success a critic can read off the reply itself
    "arithmetic": [],
    "target_string": [
        "task.name=target_string", "task.target=hello", "task.prior=plus",
        "model.pretrain_steps=150", "model.pretrain_batch_size=32",
        "model.pretrain_flawed_share=0.9", "rollout.max_new_tokens=10", "train.lr=3e-4",
    ],
}  # fmt: skip


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        *TASKS[args.task], f"model.name={model}", *ARMS[name],
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    steps = [r for r in arm.records if "reward" in r]
    seconds = lambda rows: round(statistics.fmean(r["time/step"] for r in rows), 3)  # noqa: E731
    calibration = next((r for r in steps if "rfpo/calibration_agreement" in r), {})
    judged = [r for r in steps if "rfpo/agreement" in r]
    return {
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
        "final_pass@1": arm.summary["final_eval"]["eval/pass@1"],
        "calibration_agreement": calibration.get("rfpo/calibration_agreement"),
        "calibration_auc": calibration.get("rfpo/calibration_auc"),
        "calibration_accuracy": calibration.get("rfpo/calibration_accuracy"),
        "calibration_seconds": calibration.get("time/calibration"),
        "judged_agreement": round(statistics.fmean(r["rfpo/agreement"] for r in judged), 4)
        if judged
        else None,
        "judged_pass_rate": arm.mean("rfpo/pass_rate"),
        "train_accuracy_after_switch": round(
            statistics.fmean(r["accuracy"] for r in steps[SWITCH:]), 4
        ),
        # the calibration step is left out: it samples the held-out replies once
        "seconds_per_step_before_switch": seconds(steps[:SWITCH]),
        "seconds_per_step_after_switch": seconds(steps[SWITCH + 1 :]),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--task", default="arithmetic", choices=list(TASKS))
    args = parser.parse_args()
    model = warm_start(RECIPE, TASKS[args.task])
    arms = run_all(
        args.arms, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, model)
    )
    report("rfpo", RECIPE, arms, task=args.task, steps=args.steps)


if __name__ == "__main__":
    main()
