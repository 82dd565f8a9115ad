"""Demystifying RL post-training (arXiv 2608.24949) on the target_string toy with the tiny model.

One pretrained base, two SFT variants of it, then RL arms from those, all on the same eval set:
  pretrain      warm start on random strings of the target's length (task.prior=plain): the
                target's mass is chance, about 26**-len.
  SFT+ / SFT-   a short supervised stage on top (task.prior=plus: the target in a share of the
                demonstrations; task.prior=minus: random strings that are never the target).
  RL arms       minus_exact        SFT- base, exact reward (1 only for the target)
                minus_levenshtein  SFT- base, dense reward 1 - edit distance / length
                plus_exact         SFT+ base, exact reward
                plus_random_narrow SFT+ base, Bernoulli(0.5) reward, trained on 4 prompts
                plus_random_broad  SFT+ base, Bernoulli(0.5) reward, a fresh prompt per problem
The eval prompts are always the broad set (fresh cues, none of them trained on).

At every stage (after pretraining, after SFT, after each RL arm), on the eval prompts: the
target's mass (mean log P(target | prompt), and the mean P), greedy accuracy, sampled pass@1 and
pass@k, entropy per token and per sequence of the sampled replies (rlvr.analysis), and their
mean edit distance to the target. Per RL arm also: train reward of the first and last 5 steps,
the first step with a correct sample, wall seconds. Prints one JSON object with the CPU, date and versions.

    python benchmarks/methods/demystifying.py [--steps 80] [--seeds 0 1] [arm ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch
from machine import machine
from rapidfuzz.distance.Levenshtein import distance as edit_distance

from rlvr.analysis.entropy import reply_entropy
from rlvr.analysis.passk import pass_at_k
from rlvr.analysis.target_mass import target_mass
from rlvr.config import load_config
from rlvr.models.loading import load_model
from rlvr.rollout.build import make_runner
from rlvr.train.components import build_components, build_task
from rlvr.train.trainer import Trainer
from rlvr.train.warmstart import ensure_warm_start, supervised_train

TARGET = "hello"  # 5 letters: chance mass 26**-5 = 8e-8 per reply, before the end token
K = 8  # samples per eval prompt for pass@k and entropy

ARMS: dict[str, tuple[str, list[str]]] = {
    "minus_exact": ("minus", []),
    "minus_levenshtein": ("minus", ["task.rewards={levenshtein: 1.0}"]),
    "plus_exact": ("plus", []),
    "plus_random_narrow": ("plus", ["task.rewards={random: 1.0}", "task.train_prompts=4"]),
    "plus_random_broad": ("plus", ["task.rewards={random: 1.0}"]),
}


def task_overrides(args, prior: str) -> list[str]:
    return [
        "task.name=target_string", f"task.target={TARGET}", f"task.prior={prior}",
        f"task.eval_size={args.eval_size}", f"rollout.max_new_tokens={len(TARGET) + 5}",
        f"train.seed={args.seed}",
    ]  # fmt: skip


def pretrain(args) -> Path:
    """The base: the cached warm start on random strings (task.prior=plain)."""
    cfg = load_config(
        None,
        [
            *task_overrides(args, "plain"), f"model.pretrain_steps={args.pretrain_steps}",
            "model.pretrain_batch_size=32",
        ],
    )  # fmt: skip
    return ensure_warm_start(cfg, build_task(cfg))


def sft(args, base: Path, prior: str, out: Path) -> Path:
    """A short supervised stage on the base: SFT+ (the target in 1 - flawed_share of the
    demonstrations) or SFT- (never the target)."""
    cfg = load_config(
        None,
        [
            *task_overrides(args, prior), f"model.pretrain_steps={args.sft_steps}",
            "model.pretrain_batch_size=32", "model.pretrain_lr=1e-3",
            f"model.pretrain_flawed_share={1 - args.sft_target_share}",
        ],
    )  # fmt: skip
    model, tokenizer = load_model(str(base))
    supervised_train(model, tokenizer, build_task(cfg), cfg)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@torch.no_grad()
def stage_metrics(args, model, tokenizer) -> dict[str, float]:
    """Target mass, greedy accuracy, pass@1 / pass@K and entropies on the broad eval prompts."""
    cfg = load_config(None, task_overrides(args, "plain"))
    components = build_components(cfg)
    problems = components.task.eval_problems()
    runner = make_runner(cfg, model, tokenizer, components)
    seed = (args.seed, 7, 0)
    greedy = runner.collect(problems, 1, seed, replace(runner.params, temperature=0.0))
    sampled = runner.collect(problems, K, seed)
    correct: dict[int, int] = defaultdict(int)
    for t in sampled:
        correct[t.group_id] += t.correct
    logp = target_mass(model, tokenizer, problems)
    entropy = reply_entropy(model, sampled, tokenizer.pad_token_id)
    return {
        "target_logprob": round(float(logp.mean()), 3),
        "target_prob": float(logp.exp().mean()),
        "greedy_accuracy": sum(t.correct for t in greedy) / len(greedy),
        "pass@1": round(statistics.fmean(pass_at_k(K, c, 1) for c in correct.values()), 4),
        f"pass@{K}": round(statistics.fmean(pass_at_k(K, c, K) for c in correct.values()), 4),
        "entropy_per_token": round(entropy["entropy/token"], 3),
        "entropy_per_sequence": round(entropy["entropy/sequence"], 3),
        "edit_distance_to_target": round(
            statistics.fmean(edit_distance(t.response_text.strip(), TARGET) for t in sampled), 3
        ),
        "reply_tokens": round(statistics.fmean(t.num_generated for t in sampled), 3),
    }


def run_arm(name: str, args, start_from: Path, run_dir: str) -> dict:
    prior, overrides = ARMS[name]
    cfg = load_config(
        None,
        [
            *task_overrides(args, prior), *overrides, f"model.name={start_from}",
            f"rollout.batch_size={args.batch_size}", "rollout.group_size=8",
            "algo.minibatches=2", f"train.lr={args.lr}", f"train.steps={args.steps}",
            "train.eval_every=0", "train.eval_k=1", "train.save_every=0",
            f"log.run_dir={run_dir}", f"log.name={name}-{args.seed}", "log.quiet=true",
        ],
    )  # fmt: skip
    trainer = Trainer(cfg)
    start = time.perf_counter()
    trainer.run()
    wall = time.perf_counter() - start
    steps = [r for r in trainer.run_dir.read_metrics() if "reward" in r]
    first_hit = next((r["step"] for r in steps if r["accuracy"] > 0), None)
    return {
        "rl": stage_metrics(args, trainer.model, trainer.tokenizer),
        "train_reward_first5": round(statistics.fmean(r["reward"] for r in steps[:5]), 3),
        "train_reward_last5": round(statistics.fmean(r["reward"] for r in steps[-5:]), 3),
        "train_accuracy_last5": round(statistics.fmean(r["accuracy"] for r in steps[-5:]), 3),
        "first_step_with_a_correct_sample": first_hit,
        "wall_seconds": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="*", help=f"arms (default: all of {list(ARMS)})")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--eval-size", type=int, default=64)
    parser.add_argument("--pretrain-steps", type=int, default=150)
    parser.add_argument("--sft-steps", type=int, default=120)
    parser.add_argument("--sft-target-share", type=float, default=0.3)
    args = parser.parse_args()
    started = time.perf_counter()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            args.seed = seed
            base = pretrain(args)
            model, tokenizer = load_model(str(base))
            stages = {"pretrain": stage_metrics(args, model, tokenizer)}
            starts = {}
            for prior in sorted({ARMS[a][0] for a in args.arms or ARMS}):
                starts[prior] = sft(args, base, prior, Path(tmp) / f"sft_{prior}_{seed}")
                model, tokenizer = load_model(str(starts[prior]))
                stages[f"sft_{prior}"] = stage_metrics(args, model, tokenizer)
            arms = {a: run_arm(a, args, starts[ARMS[a][0]], tmp) for a in args.arms or ARMS}
            results[f"seed_{seed}"] = {"stages": stages, "arms": arms}
    print(
        json.dumps(
            {
                "benchmark": "methods/demystifying",
                "task": f"target_string, target {TARGET!r}, eval on {args.eval_size} fresh cues",
                "chance_logprob_of_target": round(-len(TARGET) * math.log(26), 3),
                "settings": {k: v for k, v in vars(args).items() if k not in ("arms", "seed")},
                "results": results,
                "wall_seconds": round(time.perf_counter() - started, 1),
                **machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
