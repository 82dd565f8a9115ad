"""Tree search learns DFS (Yang et al., arXiv 2606.00183) at CPU scale: binary trees, RL on depths
1-2 under the depth curriculum (examples/tree_search.toml), eval on unseen depths 3 and 4.

On the same eval trees and move budget (task.max_moves):
  random_walk   uniformly random legal moves (what the warm start imitates), 200 walks per tree
  dfs           scripted depth-first search (first unexplored child, else back): the strategy the
                paper says RL finds
  base / rl     the warm-started policy before and after RL, greedy and sampled (eval_k per tree)

Prints one JSON object: per seed and arm, success per eval depth, revisits per episode (moves
into a node entered before, which DFS never makes) and moves per solved tree; the curriculum's
depth by step and training success; wall seconds; with the CPU, date and versions.

    python benchmarks/methods/tree_search.py [--steps 40] [--seeds 0 1] [--eval-size 64] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from machine import machine

from rlvr.config import load_config
from rlvr.envs.tree_search import BACK, TreeSearchEnv, children, legal_moves
from rlvr.train.trainer import Trainer
from rlvr.types import Problem

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tree_search.toml"
WALKS_PER_TREE = 200


def random_move(env: TreeSearchEnv, rng: random.Random, visited: set[str]) -> str:
    return rng.choice(legal_moves(env.nodes, env.path, env.branching))


def dfs_move(env: TreeSearchEnv, rng: random.Random, visited: set[str]) -> str:
    fresh = [j for j in children(env.nodes, env.path, env.branching) if env.path + j not in visited]
    return fresh[0] if fresh else BACK


def scripted(problems: list[Problem], move, max_moves: int, walks: int, seed: int) -> dict:
    """Success per depth (and revisits, moves) of a scripted walker through the env itself."""
    rng, rows = random.Random(seed), []
    for problem in problems:
        for _ in range(walks):
            env = TreeSearchEnv(max_moves)
            env.reset(problem)
            visited = {""}
            while True:
                step = move(env, rng, visited)
                result = env.step(step if step == BACK else f"go {step}")
                visited.add(env.path)
                if result.done:
                    break
            rows.append((problem.metadata["depth"], result.info))
    return summarise(rows)


def summarise(rows: list[tuple[int, dict]]) -> dict:
    """Per depth: success, revisits per episode, moves per solved tree."""
    out = {}
    for depth in sorted({d for d, _ in rows}):
        infos = [info for d, info in rows if d == depth]
        solved = [info["moves"] for info in infos if info.get("correct")]
        out[f"depth{depth}"] = {
            "success": round(len(solved) / len(infos), 3),
            "revisits": round(statistics.fmean(info.get("revisits", 0) for info in infos), 2),
            "moves_per_solved": round(statistics.fmean(solved), 2) if solved else None,
        }
    return out


def policy_eval(trainer: Trainer, problems: list[Problem], k: int, seed: int) -> dict:
    """Greedy, and `k` samples per tree at the training temperature, through the trainer's evaluator."""
    runner = trainer.source.evaluator
    greedy = runner.collect(problems, 1, (seed, 7, 0), replace(runner.params, temperature=0.0))
    sampled = runner.collect(problems, k, (seed, 7, 1))
    return {"greedy": summarise(episodes(greedy)), "sampled": summarise(episodes(sampled))}


def episodes(trajectories) -> list[tuple[int, dict]]:
    return [(t.problem.metadata["depth"], {**t.info, "correct": t.correct}) for t in trajectories]


def run_seed(seed: int, args, run_dir: str) -> dict:
    overrides = [
        f"train.seed={seed}", f"train.steps={args.steps}", "train.eval_every=0", "train.eval_k=1",
        "train.save_every=0", f"task.eval_size={args.eval_size}",
        f"model.pretrain_steps={args.pretrain_steps}", f"log.run_dir={run_dir}",
        f"log.name=seed{seed}", "log.quiet=true", *args.overrides,
    ]  # fmt: skip
    trainer = Trainer(load_config(EXAMPLE, overrides))
    problems, max_moves = trainer.eval_problems, trainer.cfg.task.params["max_moves"]
    result = {
        "random_walk": scripted(problems, random_move, max_moves, WALKS_PER_TREE, seed),
        "dfs": scripted(problems, dfs_move, max_moves, 1, seed),
        "base": policy_eval(trainer, problems, args.eval_k, seed),
    }
    start = time.perf_counter()
    trainer.run()
    wall = time.perf_counter() - start
    result["rl"] = policy_eval(trainer, problems, args.eval_k, seed)
    steps = [r for r in trainer.run_dir.read_metrics() if "loss" in r]
    result["curriculum_depth_by_step"] = [int(r["curriculum/depth"]) for r in steps]
    result["train_success_first5"] = round(statistics.fmean(r["accuracy"] for r in steps[:5]), 3)
    result["train_success_last5"] = round(statistics.fmean(r["accuracy"] for r in steps[-5:]), 3)
    result["rl_wall_seconds"] = round(wall, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="extra config overrides, e.g. train.lr=2e-4")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--eval-size", type=int, default=64)
    parser.add_argument("--eval-k", type=int, default=4)
    parser.add_argument("--pretrain-steps", type=int, default=200)
    args = parser.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        seeds = {str(seed): run_seed(seed, args, run_dir) for seed in args.seeds}
    print(
        json.dumps(
            {
                "benchmark": "methods/tree_search",
                "config": "examples/tree_search.toml",
                "steps": args.steps,
                "pretrain_steps": args.pretrain_steps,
                "overrides": args.overrides,
                "eval_trees": args.eval_size,
                "eval_k": args.eval_k,
                "seeds": seeds,
                "wall_seconds": round(time.perf_counter() - start, 1),
                **machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
