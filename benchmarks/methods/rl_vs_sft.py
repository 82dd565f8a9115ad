"""RL against SFT, mechanistically (arXiv 2607.26119) on the default task with the tiny model.

One base (the default task's seed-0 warm start, greedy about 0.32: it drops carries in 60% of
its demonstrations), and per seed two models trained from it on the same problems:
  rl    GRPO, the default run's settings: `--steps` steps of 16 problems x 8 samples.
  sft   next-token loss on the task's reference solutions (its correct demonstrations) of
        exactly the problems the RL run drew, step for step (the same 16 problems a step, one
        pass), AdamW at `--sft-lr`, by default RL's 1e-4 (1e-3 fell to 0.30-0.73 greedy).
Then rlvr.analysis.mechanism.compare measures base, rl and sft on the same held-out problems
with the same sampling seeds: per decoder layer the held-out probe AUC of answer correctness
(5-fold logistic regression on each layer's mean hidden state over a reply's last tokens,
`--k` sampled replies per problem) and the drop in greedy accuracy when the layer is
mean-ablated (its output minus input replaced by its mean over those replies).

Prints one JSON object per seed, then one with the CPU, date and versions.

    python benchmarks/methods/rl_vs_sft.py [--seeds 0 1 2] [--steps 15] [--problems 100] [--k 8]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch
from machine import machine

from rlvr.analysis.mechanism import compare, per_layer
from rlvr.config import load_config
from rlvr.models.loading import load_model
from rlvr.rollout.build import make_runner
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.train.warmstart import ensure_warm_start, sft_backward, sft_examples

PROMPTS_PER_STEP = 16  # the default run's 128 samples in groups of 8


def settings(args, seed: int) -> list[str]:
    return [
        f"train.seed={seed}", f"train.steps={args.steps}", f"task.eval_size={args.problems}",
        "train.eval_k=1", "rollout.batch_size=128", "rollout.group_size=8",
    ]  # fmt: skip


def base_model() -> str:
    """The default task's seed-0 warm start (cached): every seed's RL and SFT start from it."""
    cfg = load_config(None, [])
    return str(ensure_warm_start(cfg, build_components(cfg).task))


def train_rl(args, base: str, seed: int, run_dir: str) -> Trainer:
    quiet = [f"log.run_dir={run_dir}", f"log.name=rl-{seed}", "log.quiet=true",
             "log.report=false", "train.save_every=0"]  # fmt: skip
    trainer = Trainer(load_config(None, [*settings(args, seed), f"model.name={base}", *quiet]))
    trainer.run()
    return trainer


def train_sft(args, base: str, seed: int, task):
    """The base trained on the correct demonstrations of the problems the RL run of this seed
    drew (its data cursor: step s reads train problems 16 s .. 16 s + 15)."""
    model, tokenizer = load_model(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.sft_lr, weight_decay=0.01)
    model.train()
    for step in range(args.steps):
        first = step * PROMPTS_PER_STEP
        examples = [e for index in range(first, first + PROMPTS_PER_STEP)
                    for e in sft_examples(tokenizer, task, index, flawed=False)]  # fmt: skip
        optimizer.zero_grad(set_to_none=True)
        sft_backward(model, examples, tokenizer.pad_token_id)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return model.eval(), tokenizer


def rounded(result: dict) -> dict:
    return {
        "greedy": round(result["ablation/greedy"], 3),
        "sampled": round(result["sampled_accuracy"], 3),
        "probe_auc": [round(v, 3) for v in per_layer(result, "probe_auc")],
        "ablation_drop": [round(v, 3) for v in per_layer(result, "ablation")],
        "auc_depth_slope": round(result.get("probe_auc/depth_slope", float("nan")), 3),
        "drop_depth_slope": round(result["ablation/depth_slope"], 3),
    }


def run_seed(args, base: str, seed: int, run_dir: str) -> dict:
    cfg = load_config(None, [*settings(args, seed), f"model.name={base}"])
    components = build_components(cfg)
    start = time.perf_counter()
    rl = train_rl(args, base, seed, run_dir)
    rl_seconds = time.perf_counter() - start
    start = time.perf_counter()
    sft_model, tokenizer = train_sft(args, base, seed, components.task)
    sft_seconds = time.perf_counter() - start
    base_model_, _ = load_model(base)
    models = {
        name: (model, tokenizer, make_runner(cfg, model, tokenizer, components))
        for name, model in (("base", base_model_.eval()), ("rl", rl.model.eval()),
                            ("sft", sft_model))
    }  # fmt: skip
    problems = components.task.eval_problems()
    start = time.perf_counter()
    found = compare(models, problems, args.k, seed)
    return {
        "seed": seed, **{name: rounded(result) for name, result in found.items()},
        "seconds": {"rl": round(rl_seconds, 1), "sft": round(sft_seconds, 1),
                    "analysis": round(time.perf_counter() - start, 1)},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=15, help="RL steps (and SFT steps a pass)")
    parser.add_argument("--sft-lr", type=float, default=1e-4)
    parser.add_argument("--problems", type=int, default=100, help="held-out problems")
    parser.add_argument("--k", type=int, default=8, help="sampled replies per problem")
    args = parser.parse_args()
    base = base_model()
    with tempfile.TemporaryDirectory() as run_dir:
        for seed in args.seeds:
            print(json.dumps(run_seed(args, base, seed, run_dir)), flush=True)
    print(json.dumps({"benchmark": "methods/rl_vs_sft", "settings": vars(args), **machine()}))


if __name__ == "__main__":
    main()
