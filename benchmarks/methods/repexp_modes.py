"""RepExp (arXiv 2510.11686) with two equally rewarded answer modes: does the exploration bonus
keep both alive, so pass@8 for a given mode stays higher than under plain GRPO?

The target_string toy with `task.alternative`: "hello" and "world" are both correct, and the SFT+
warm start shows each in half of its demonstrations (the rest are random strings), so the base
says either now and then. Arms differ only in methods.repexp.beta (0: the method off, plain GRPO) and share
the warm start, budget and seeds. After each run, K replies per held-out prompt (temperature 1,
seeded) are sorted by mode:
  pass@K            some reply is either target (what the run's reward asks for)
  pass@K per mode   some reply is that target, averaged over the two modes: the chance a user
                    who wants one particular answer finds it among K samples
  both modes        the share of prompts whose K replies contain both targets
  minority share    the less frequent mode's share of the correct replies (0.5 = balanced)

    python benchmarks/methods/repexp_modes.py [--steps 40] [--seeds 0 1 2] [--betas 0 0.01 0.1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr.config import load_config
from rlvr.models.loading import load_model
from rlvr.train.components import build_task

from runs import report, run_all, sample_texts, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "target_string.toml"
MODES = ("hello", "world")
K = 8


def task_overrides(args) -> list[str]:
    return [
        f"task.target={MODES[0]}", f"task.alternative={MODES[1]}", f"task.eval_size={args.eval_size}",
        "model.pretrain_flawed_share=0.7",
        f"train.eval_k={K}",
    ]  # fmt: skip


def mode_coverage(model, tokenizer, problems, max_new_tokens: int) -> dict:
    """Sort K seeded samples per prompt by mode; the shares described in the module docstring."""
    texts = sample_texts(model, tokenizer, problems, K, max_new_tokens)
    per_prompt = [set(texts[i * K : (i + 1) * K]) for i in range(len(problems))]
    hits = {mode: sum(mode in seen for seen in per_prompt) / len(problems) for mode in MODES}
    counts = [texts.count(mode) for mode in MODES]
    return {
        f"pass@{K}": round(sum(bool(seen & set(MODES)) for seen in per_prompt) / len(problems), 4),
        f"pass@{K}_per_mode": round(sum(hits.values()) / len(MODES), 4),
        f"pass@{K}_by_mode": {mode: round(share, 4) for mode, share in hits.items()},
        "both_modes": round(sum(set(MODES) <= seen for seen in per_prompt) / len(problems), 4),
        "correct_share": round(sum(counts) / len(texts), 4),
        "minority_share": round(min(counts) / sum(counts), 4) if sum(counts) else None,
    }


def run_arm(beta: float, seed: int, args, run_dir: str, model_path: str) -> dict:
    arm = train_arm(RECIPE, [
        *task_overrides(args), f"model.name={model_path}", *([f"methods.repexp.beta={beta}"] if beta else ["methods.repexp=null"]),
        f"train.steps={args.steps}", f"train.seed={seed}",
    ], run_dir, f"beta{beta}-{seed}")  # fmt: skip
    trainer = arm.trainer
    coverage = mode_coverage(
        trainer.model, trainer.tokenizer, trainer.eval_problems, trainer.cfg.rollout.max_new_tokens
    )
    return {
        **coverage,
        "final_pass@1": arm.summary["final_eval"]["eval/pass@1"],
        "mean_bonus": arm.mean("exploration/bonus"),
        "mean_bonus_groups": arm.mean("exploration/groups"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval-size", type=int, default=64)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.01, 0.1])
    args = parser.parse_args()
    model_path = warm_start(RECIPE, task_overrides(args))
    cfg = load_config(RECIPE, task_overrides(args))
    model, tokenizer = load_model(model_path)
    base = mode_coverage(
        model, tokenizer, build_task(cfg).eval_problems(), cfg.rollout.max_new_tokens
    )
    arms = run_all(
        [f"beta_{beta:g}" for beta in args.betas],
        args.seeds,
        lambda arm, seed, run_dir: run_arm(float(arm[5:]), seed, args, run_dir, model_path),
    )
    report(
        "repexp_modes", RECIPE, arms, task=f"target_string, modes {MODES}", steps=args.steps,
        k=K, base=base,
    )  # fmt: skip


if __name__ == "__main__":
    main()
