"""Outcome RL teaches chain of thought, in the paper's own setting (arXiv 2601.15158): a small
transformer trained from scratch on graph_walk's tokens layout, rewarded on the final vertex only.
Does the reply become a vertex-by-vertex walk, and only when enough one-hop instances are mixed in?

Every arm and seed starts from the untrained model of examples/graph_walk_scratch.toml
(initialised from train.seed, no warm start) and runs GRPO with a different task.short_share: the
share of training problems that take one hop; the rest, and every eval problem, take task.hops.
Per arm and seed: held-out greedy accuracy on the long walks along the run and at the end, greedy
accuracy on SHORT_PROBLEMS one-hop problems drawn apart from training (a one-hop problem is 1 of
only 720 on 6 vertices, so training may have seen it), the one-hop training accuracy over the
first and last 10 steps, and how far the final greedy replies to the long eval problems follow
the graph's edges (steps_followed: 1 = every vertex is the right next one; chance 1/vertices).
Prints one JSON object with the CPU, date and versions.

    python benchmarks/methods/graph_walk_scratch.py [--steps 200] [--seeds 0 1 2] [--shares 0 0.25 0.5]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.tokens import encode_prompt
from rlvr.tasks.graph_walk import GraphWalkParams, GraphWalkTask, steps_followed

from runs import report, run_all, train_arm

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "graph_walk_scratch.toml"
SHORT_PROBLEMS = 64


def greedy(trainer, problems) -> tuple[float, float]:
    """(accuracy, mean steps_followed) of the final policy's greedy replies to `problems`."""
    prompts = [encode_prompt(trainer.tokenizer, p.messages()) for p in problems]
    replies = HFEngine(trainer.model, trainer.tokenizer).generate(
        prompts, SamplingParams(trainer.cfg.rollout.max_new_tokens, 0.0)
    )
    check = trainer.components.verifier
    accuracy = statistics.fmean(check(p, r.text).value for p, r in zip(problems, replies))
    followed = statistics.fmean(steps_followed(p, r.text) for p, r in zip(problems, replies))
    return round(accuracy, 4), round(followed, 4)


def one_hop_problems(trainer) -> list:
    """SHORT_PROBLEMS one-hop problems from a task of another seed (short_share 1)."""
    params = {**trainer.cfg.task.params, "short_share": 1.0}
    task = GraphWalkTask(GraphWalkParams.model_validate(params), seed=10_000, eval_size=1)
    return [task.train_problem(i) for i in range(SHORT_PROBLEMS)]


def run_arm(share: float, seed: int, args, run_dir: str) -> dict:
    arm = train_arm(RECIPE, [
        f"task.short_share={share}", f"train.steps={args.steps}",
        f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"share{share}-{seed}")  # fmt: skip
    key = "domain/graph_walk_1hop/accuracy" if share < 1 else "accuracy"
    short = [r[key] for r in arm.records if key in r] if share > 0 else []
    long_accuracy, long_followed = greedy(arm.trainer, arm.trainer.eval_problems)
    one_hop_accuracy, _ = greedy(arm.trainer, one_hop_problems(arm.trainer))
    return {
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "final_long_accuracy": long_accuracy,
        "final_one_hop_accuracy": one_hop_accuracy,
        "final_long_steps_followed": long_followed,
        "train_one_hop_accuracy_first_10": round(statistics.fmean(short[:10]), 4)
        if short
        else None,
        "train_one_hop_accuracy_last_10": round(statistics.fmean(short[-10:]), 4)
        if short
        else None,
        "seconds_per_step": arm.mean("time/step"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.25, 0.5])
    args = parser.parse_args()
    arms = run_all(
        args.shares, args.seeds, lambda share, seed, run_dir: run_arm(share, seed, args, run_dir)
    )
    report("graph_walk_scratch", RECIPE, {f"short_share_{s:g}": v for s, v in arms.items()},
           steps=args.steps)  # fmt: skip


if __name__ == "__main__":
    main()
