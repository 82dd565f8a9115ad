"""Parason (arXiv 2608.24658): does PA-GRPO keep accuracy while cutting the critical path, where
plain GRPO on the same warm start, budget and seeds does not?

The `product_sum` task (sums of two independent products), warm-started on demonstrations that
work the products one after another or, in 40% of them, as parallel <Subtask> threads. Arms
differ in the parallel bonus: `grpo` (all parallel weights 0) and `pa_grpo` (the recipe:
0.5 * min(acceleration - 1, 0.2), subtask share and acceleration z-scored, on correct replies);
and in how training samples: in one pass (the model writes the whole trace), or, in the
`_dispatched` arms, with each region's threads dispatched blind to each other and every later
thread trained as its own sequence with its episode's advantage (`methods.parason.dispatch`).

Each policy (the warm start, and each arm's final one) is measured on the held-out problems
greedy and with 4 samples at temperature 1, each in one pass (the model writes the whole trace)
and with its parallel regions dispatched to blind sibling threads (`generate_parallel`: a
thread sees the outlines but not its siblings). Each reports accuracy, mean total and
critical-path tokens (the outlines plus the longest thread: what a dispatcher waits for), the
share of replies with a parallel region and the share that parse.

Prints one JSON object: the base's and each arm and seed's measurements, the last training
steps' mean acceleration and parallel share, wall seconds; with the CPU, date and versions.

    python benchmarks/methods/parason.py [--steps 40] [--seeds 0 1] [--arms pa_grpo ...]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rlvr.config import load_config
from rlvr.models.loading import load_model
from rlvr.rewards import REWARDS
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.parallel import counter_for, generate_parallel, trace_stats
from rlvr.rollout.tokens import encode_prompt
from rlvr.train.components import build_task

from runs import report, run_all, sample_texts, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "parason.toml"
OFF = [f"methods.parason.{key}=0" for key in ("accel_weight", "subtask_beta", "latency_alpha")]
DISPATCH = ["methods.parason.dispatch=true"]
ARMS = {
    "grpo": ["methods.parason=null"],  # no shaping and no dispatch: the method is off
    "pa_grpo": [],
    "pa_grpo_dispatched": DISPATCH,
    "grpo_dispatched": OFF + DISPATCH,
}
K = 4


def measure_texts(task, tokenizer, problems, texts: list[str]) -> dict:
    """Accuracy and trace shape of replies, problem-major (len(texts) a multiple of problems)."""
    verify, per = REWARDS[task.verifier](), len(texts) // len(problems)
    owners = [p for p in problems for _ in range(per)]
    stats = [trace_stats(t, counter_for(tokenizer, t)) for t in texts]
    mean = lambda values: round(statistics.fmean(values), 4)  # noqa: E731
    return {
        "accuracy": mean(verify(p, t).value == 1.0 for p, t in zip(owners, texts)),
        "total_tokens": mean(s.total_tokens for s in stats),
        "critical_path_tokens": mean(s.critical_path_tokens for s in stats),
        "parallel_share": mean(s.regions > 0 for s in stats),
        "well_formed": mean(s.well_formed for s in stats),
    }


def measure(model, tokenizer, task, max_new_tokens: int) -> dict:
    problems = task.eval_problems()
    prompts = [encode_prompt(tokenizer, p.messages()) for p in problems]
    greedy = SamplingParams(max_new_tokens, 0.0)
    engine = HFEngine(model.eval(), tokenizer)
    one_pass = [c.text for c in engine.generate(prompts, greedy)]
    dispatched = [e.text for e in generate_parallel(engine, prompts, tokenizer, greedy)]
    sampled = sample_texts(model, tokenizer, problems, K, max_new_tokens)
    repeated = [prompt for prompt in prompts for _ in range(K)]
    sampled_dispatched = generate_parallel(
        engine, repeated, tokenizer, SamplingParams(max_new_tokens, 1.0), list(range(len(repeated)))
    )
    return {
        "greedy_one_pass": measure_texts(task, tokenizer, problems, one_pass),
        "greedy_dispatched": measure_texts(task, tokenizer, problems, dispatched),
        f"sampled_{K}_one_pass": measure_texts(task, tokenizer, problems, sampled),
        f"sampled_{K}_dispatched": measure_texts(
            task, tokenizer, problems, [e.text for e in sampled_dispatched]
        ),
    }


def run_arm(overrides: list[str], name: str, seed: int, args, run_dir: str, model: str, task):
    arm = train_arm(RECIPE, [
        f"model.name={model}", *overrides, f"train.steps={args.steps}", "train.eval_every=0",
        f"train.seed={seed}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    trainer = arm.trainer
    # logged only where the bonus is on
    last = lambda key: [r[key] for r in arm.records if key in r][-10:]  # noqa: E731
    return {
        "final": measure(trainer.model, trainer.tokenizer, task, args.tokens),
        **{
            f"last_10_steps_{key}": round(statistics.fmean(last(f"parallel/{key}")), 4)
            for key in ("acceleration", "regions", "critical_path_tokens")
            if last(f"parallel/{key}")
        },
        "mean_train_accuracy": arm.mean("accuracy"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    args = parser.parse_args()
    cfg = load_config(RECIPE)
    args.tokens = cfg.rollout.max_new_tokens
    model = warm_start(RECIPE, [])
    task = build_task(cfg)  # every policy on the same held-out problems (a seed draws its own)
    base = measure(*load_model(model), task, args.tokens)
    arms = run_all(
        args.arms,
        args.seeds,
        lambda arm, seed, run_dir: run_arm(ARMS[arm], arm, seed, args, run_dir, model, task),
    )
    report("parason", RECIPE, arms, task="product_sum", steps=args.steps, base=base)


if __name__ == "__main__":
    main()
