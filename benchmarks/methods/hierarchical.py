"""Hierarchical rewards with a KL-regularised actor-critic (Nishikawa & Suzuki): on nested levels
(examples/nested_levels.toml: 4 levels of 2 bits, level i visible only once levels < i are
solved), PPO with a GAE critic and a KL to the reference, sampling from its own policy, against
the same critic and policy trained on as many samples drawn from the reference policy.

Arms (same warm start, seed, config and samples per step):
  on_policy   the library's path: each step samples from the current policy
  reference   each step samples from a frozen copy of the starting policy (pi_ref); the
              critic fits those samples and the policy is updated on them, with the
              decoupled objective (algo.tis=token) correcting for the sampler
Both arms run algo.tis=token, so both compute the same logprob passes.

Prints one JSON object: per seed and arm, eval before and after, greedy and sampled (mean
levels solved in order, share of replies at each level, reward), the training reward of the
first and last 5 steps (the sampler's, so the reference arm's stays the reference's), and the
deepest level any training sample reached by step; the mean over seeds; CPU, date, versions.

    python benchmarks/methods/hierarchical.py [--steps 100] [--seeds 0 1 2] [--eval-samples 8]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from machine import machine

from rlvr.config import load_config
from rlvr.rollout import HFEngine
from rlvr.rollout.build import make_runner
from rlvr.train.trainer import Trainer
from rlvr.types import Trajectory

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nested_levels.toml"
ARMS = ("on_policy", "reference")


def depth(trajectory: Trajectory) -> int:
    """Levels solved in order (the gate stops at the first unsolved one)."""
    levels = trajectory.info["components"]
    return sum(1 for name in levels if levels[name] >= 1.0)


def levels_reached(trajectories: list[Trajectory], levels: int) -> dict:
    depths = [depth(t) for t in trajectories]
    return {
        "mean_levels": round(statistics.fmean(depths), 3),
        "share_at_level": [
            round(sum(d >= i for d in depths) / len(depths), 3) for i in range(1, levels + 1)
        ],
        "reward": round(statistics.fmean(t.reward for t in trajectories), 4),
    }


def policy_eval(trainer: Trainer, levels: int, samples: int) -> dict:
    """Levels the policy reaches on the eval keys: greedy, and `samples` replies per problem at
    the training temperature (the policy's own distribution, which greedy decoding hides)."""
    runner, seed = trainer.source.evaluator, trainer.cfg.train.seed
    greedy = replace(runner.params, temperature=0.0)
    return {
        "greedy": levels_reached(
            runner.collect(trainer.eval_problems, 1, (seed, 9, 0), greedy), levels
        ),
        "sampled": levels_reached(
            runner.collect(trainer.eval_problems, samples, (seed, 9, 1)), levels
        ),
    }


def sample_from_reference(trainer: Trainer) -> None:
    """Training samples come from a frozen copy of the starting policy; eval keeps the policy."""
    reference = copy.deepcopy(trainer.model).eval().requires_grad_(False)
    r = trainer.cfg.rollout
    engine = HFEngine(reference, trainer.tokenizer, r.max_batch_size)
    trainer.source.runner = make_runner(
        trainer.cfg, reference, trainer.tokenizer, trainer.components, engine=engine
    )


def run_arm(arm: str, seed: int, args, run_dir: str) -> dict:
    overrides = [
        f"train.seed={seed}", f"train.steps={args.steps}", "train.eval_every=0",
        "train.save_every=0", "algo.tis=token", f"log.run_dir={run_dir}",
        f"log.name={arm}-{seed}", "log.quiet=true",
    ]  # fmt: skip
    trainer = Trainer(load_config(EXAMPLE, overrides))
    levels = trainer.cfg.task.params["levels"]
    if arm == "reference":
        sample_from_reference(trainer)
    deepest = []
    collect = trainer.source.collect

    def recording(problems, group_size, seed_parts):
        trajectories = collect(problems, group_size, seed_parts)
        deepest.append(max(depth(t) for t in trajectories))
        return trajectories

    trainer.source.collect = recording
    before = policy_eval(trainer, levels, args.eval_samples)
    start = time.perf_counter()
    trainer.run()
    wall = time.perf_counter() - start
    steps = [r for r in trainer.run_dir.read_metrics() if "loss" in r]
    return {
        "base": before,
        "final": policy_eval(trainer, levels, args.eval_samples),
        "train_reward_first5": round(statistics.fmean(r["reward"] for r in steps[:5]), 4),
        "train_reward_last5": round(statistics.fmean(r["reward"] for r in steps[-5:]), 4),
        "deepest_sampled_level_by_step": deepest,
        "wall_seconds": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-samples", type=int, default=8)
    args = parser.parse_args()
    start = time.perf_counter()
    runs: dict[str, dict[str, dict]] = {arm: {} for arm in ARMS}
    with tempfile.TemporaryDirectory() as run_dir:
        for seed in args.seeds:
            for arm in ARMS:
                runs[arm][str(seed)] = run_arm(arm, seed, args, run_dir)
    mean = {
        arm: {
            f"{mode}_{key}": round(
                statistics.fmean(r["final"][mode][key] for r in by_seed.values()), 3
            )
            for mode in ("greedy", "sampled")
            for key in ("mean_levels", "reward")
        }
        for arm, by_seed in runs.items()
    }
    print(
        json.dumps(
            {
                "benchmark": "methods/hierarchical",
                "config": "examples/nested_levels.toml",
                "steps": args.steps,
                "samples_per_step": load_config(EXAMPLE).rollout.batch_size,
                "mean_over_seeds": mean,
                "arms": runs,
                "wall_seconds": round(time.perf_counter() - start, 1),
                **machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
