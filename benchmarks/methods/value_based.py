"""Value-based RL from logged rollouts (the RL-for-LM survey's third family): token-level soft
Q-learning on the policy's logits (loss soft_q, targets from soft_bellman) against filtered
behaviour cloning (advantage raft, loss reinforce) on the same buffer.

Per seed, a logging run samples the default task's training prompts with the warm start, which
does not move (train.lr 1e-12), and writes every reply to samples.jsonl. Each arm then replays
that log (rollout.replay) for the same steps, so all see the same replies in the same order and
none samples. Per arm and seed: held-out greedy accuracy along the run (step 0 is the warm
start's), the final accuracy and its change, and seconds per step. Prints one JSON object with
the CPU, date and versions.

    python benchmarks/methods/value_based.py [--steps 30] [--seeds 0 1] [--betas 0.1 1.0]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "soft_q.toml"


def log_buffer(seed: int, args, run_dir: str) -> str:
    """samples.jsonl of every reply the warm start gives the run's training prompts."""
    batch = 128  # the recipe's rollout.batch_size: every reply of every step is logged
    arm = train_arm(RECIPE, [
        f"train.steps={args.steps}", f"train.seed={seed}", "train.lr=1e-12", "train.eval_every=0",
        "algo.advantage=grpo", "algo.loss=ppo_clip", "algo.advantage_params={}",
        "algo.loss_params={}", f"log.samples_per_step={batch}",
        f"task.eval_size={args.eval_size}",
    ], run_dir, f"log-{seed}")  # fmt: skip
    return str(arm.trainer.run_dir.samples_file)


def run_arm(name: str, seed: int, args, run_dir: str, buffers: dict[int, str]) -> dict:
    if seed not in buffers:
        buffers[seed] = log_buffer(seed, args, run_dir)
    algo = (
        [
            "algo.advantage=raft",
            "algo.loss=reinforce",
            "algo.advantage_params={}",
            "algo.loss_params={}",
        ]
        if name == "filtered_bc"
        else [
            *(
                f"algo.{part}_params.beta={name.removeprefix('soft_q_beta')}"
                for part in ("advantage", "loss")
            ),
            f"algo.lam={args.lam}",
        ]  # fmt: skip
    )
    arm = train_arm(RECIPE, [
        *algo, f"rollout.replay={buffers[seed]}", f"train.steps={args.steps}",
        f"train.seed={seed}", f"train.eval_every={args.eval_every}", f"train.lr={args.lr}",
        f"task.eval_size={args.eval_size}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    curve = arm.by_step("eval/accuracy")
    return {
        "eval_accuracy_by_step": curve,
        "final_accuracy": curve[max(curve)],
        "accuracy_change": round(curve[max(curve)] - curve[0], 4),
        "buffer_accuracy": arm.mean("accuracy"),
        "seconds_per_step": arm.mean("time/step"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-size", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--betas", type=float, nargs="+", default=[0.1, 1.0])
    parser.add_argument("--lam", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()
    warm_start(RECIPE, [])
    buffers: dict[int, str] = {}
    names = ["filtered_bc", *(f"soft_q_beta{b:g}" for b in args.betas)]
    arms = run_all(names, args.seeds, lambda n, s, d: run_arm(n, s, args, d, buffers))
    means = {
        name: round(statistics.fmean(r["accuracy_change"] for r in runs.values()), 4)
        for name, runs in arms.items()
    }
    report("value_based", RECIPE, arms, steps=args.steps, lam=args.lam, lr=args.lr,
           mean_accuracy_change=means)  # fmt: skip


if __name__ == "__main__":
    main()
