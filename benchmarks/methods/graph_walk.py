"""Outcome RL teaches chain of thought (arXiv 2601.15158): on graph_walk, rewarded on the final
vertex only, does RL turn the reply's intermediate vertices into a real walk, and does that need
enough short (one-hop) instances in the training mix?

Every arm starts from one warm start that taught only the reply's shape, with random vertices
(examples/graph_walk.toml), and runs GRPO with a different task.short_share: the share of
training problems that take one hop; the rest, and every eval problem, take task.hops. Per arm
and seed: held-out greedy accuracy on the long walks along the run, the step where it first
reaches --learned (learning started), the training accuracy on long instances over the first and
last 10 steps, and how far the final model's greedy replies follow the graph's edges
(steps_followed: 1 = every intermediate vertex is the right next one; chance is 1/vertices).
Prints one JSON object with the CPU, date and versions.

    python benchmarks/methods/graph_walk.py [--steps 200] [--seeds 0 1] [--shares 0 0.1 0.25 0.5]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.tokens import encode_prompt
from rlvr.tasks.graph_walk import steps_followed

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "graph_walk.toml"


def greedy_walks(trainer) -> float:
    """Mean steps_followed of the final policy's greedy replies to the eval problems."""
    problems = trainer.eval_problems
    prompts = [encode_prompt(trainer.tokenizer, p.messages()) for p in problems]
    replies = HFEngine(trainer.model, trainer.tokenizer).generate(
        prompts, SamplingParams(trainer.cfg.rollout.max_new_tokens, 0.0)
    )
    return round(statistics.fmean(steps_followed(p, r.text) for p, r in zip(problems, replies)), 4)


def run_arm(share: float, seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        f"model.name={model}", f"task.short_share={share}", f"train.steps={args.steps}",
        f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"share{share}-{seed}")  # fmt: skip
    hops = arm.trainer.cfg.task.params["hops"]
    # With both lengths in the batch the long ones are logged as their own domain; at share 1
    # training sees none.
    key = f"domain/graph_walk_{hops}hop/accuracy" if share > 0 else "accuracy"
    long = [r[key] for r in arm.records if key in r] if share < 1 else []
    curve = arm.by_step("eval/accuracy")
    learned = [step for step, accuracy in curve.items() if accuracy >= args.learned]
    return {
        "eval_accuracy_by_step": curve,
        "learned_at_step": learned[0] if learned else None,
        "train_long_accuracy_first_10": round(statistics.fmean(long[:10]), 4) if long else None,
        "train_long_accuracy_last_10": round(statistics.fmean(long[-10:]), 4) if long else None,
        "final_steps_followed": greedy_walks(arm.trainer),
        "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
        "seconds_per_step": arm.mean("time/step"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.1, 0.25, 0.5])
    parser.add_argument("--learned", type=float, default=0.5, help="accuracy that counts")
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(
        args.shares, args.seeds,
        lambda share, seed, run_dir: run_arm(share, seed, args, run_dir, model),
    )  # fmt: skip
    report("graph_walk", RECIPE, {f"short_share_{s:g}": v for s, v in arms.items()},
           steps=args.steps, learned_threshold=args.learned)  # fmt: skip


if __name__ == "__main__":
    main()
