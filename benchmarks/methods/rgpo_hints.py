"""RGPO (arXiv 2610.07342) where hints matter: a base that almost never says the target alone but
does given half the rationale. Does RGPO raise unhinted accuracy where GRPO stays flat?

The target_string toy ("hello"). The warm start shows the target in 1% of its demonstrations
(the rest are random strings) and carries RGPO's hint on most of its prompts
(`model.pretrain_hint_share`: the first 1 or 2 of 2 segments of the reply shown), so the base
learns to read a hint the way a real LLM can. The rationale is the target itself, cut into
"hel" + "lo". Arms share the warm start, budget and seeds: GRPO (no methods.rgpo) and RGPO
at the paper's imitation weight and at larger ones.

Prints one JSON object: the base's success rate unhinted, with half the rationale and with all
of it (8 samples per held-out prompt); per arm and seed, held-out pass@1 along the run (never
hinted), the share of groups hinted and rescued, the hinted re-rollouts' accuracy, the imitated
replies per step, wall seconds; with the CPU, date and versions.

    python benchmarks/methods/rgpo_hints.py [--steps 40] [--seeds 0 1] [--sft-coefs 0.001 0.1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr.config import load_config
from rlvr.models.loading import load_model
from rlvr.tasks.hints import hinted, rationale_segments
from rlvr.train.components import build_task

from runs import report, run_all, sample_texts, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "target_string.toml"
TARGET, SEGMENTS, K = "hello", 2, 8
TASK = [
    f"task.target={TARGET}", f"model.pretrain_hint_segments={SEGMENTS}", "model.pretrain_flawed_share=0.99",
    "model.pretrain_hint_share=0.9",
]  # fmt: skip


def base_success(args) -> dict:
    """The warm start's share of correct replies with 0, 1 and 2 of the 2 segments as a hint."""
    overrides = [*TASK, f"model.pretrain_steps={args.pretrain_steps}"]
    cfg = load_config(RECIPE, overrides)
    model, tokenizer = load_model(warm_start(RECIPE, overrides))
    problems = build_task(cfg).eval_problems()
    pieces = rationale_segments(TARGET, SEGMENTS)
    shares = {}
    for level in range(SEGMENTS + 1):
        shown = [hinted(p, "".join(pieces[:level])) if level else p for p in problems]
        texts = sample_texts(model, tokenizer, shown, K, cfg.rollout.max_new_tokens)
        shares[f"{level}_of_{SEGMENTS}"] = round(texts.count(TARGET) / len(texts), 4)
    return shares


def run_arm(sft_coef: float | None, seed: int, args, run_dir: str, model: str) -> dict:
    method = (
        [] if sft_coef is None
        else [f"methods.rgpo.segments={SEGMENTS}", f"methods.rgpo.sft_coef={sft_coef}"]
    )  # fmt: skip
    arm = train_arm(RECIPE, [
        f"task.target={TARGET}", f"model.name={model}", *method,
        f"train.steps={args.steps}", f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"{sft_coef}-{seed}")  # fmt: skip
    return {
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        "final_pass@1": arm.summary["final_eval"]["eval/pass@1"],
        "final_pass@8": arm.summary["final_eval"]["eval/pass@8"],
        "mean_train_accuracy": arm.mean("accuracy"),
        "mean_hinted_groups": arm.mean("rgpo/hinted_groups"),
        "mean_rescued_groups": arm.mean("rgpo/rescued_groups"),
        "mean_revised_accuracy": arm.mean("rgpo/revised_accuracy"),
        "mean_imitated": arm.mean("rgpo/imitated"),
        "wall_seconds": arm.wall_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--pretrain-steps", type=int, default=3000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--sft-coefs", type=float, nargs="+", default=[0.001, 0.1])
    args = parser.parse_args()
    model = warm_start(RECIPE, [*TASK, f"model.pretrain_steps={args.pretrain_steps}"])
    base = base_success(args)
    coefs = {"grpo": None, **{f"rgpo_{c:g}": c for c in args.sft_coefs}}
    arms = run_all(
        coefs,
        args.seeds,
        lambda arm, seed, run_dir: run_arm(coefs[arm], seed, args, run_dir, model),
    )
    report(
        "rgpo_hints", RECIPE, arms, task=f"target_string ({TARGET!r}), hinted warm start",
        steps=args.steps, pretrain_steps=args.pretrain_steps, base_success=base,
    )  # fmt: skip


if __name__ == "__main__":
    main()
