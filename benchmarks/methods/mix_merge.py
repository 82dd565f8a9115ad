"""Multi-domain RLVR, mix versus merge (M2RL, arXiv 2602.12566) on two arithmetic domains: does
one mixed run, or two single-domain runs merged, beat each single-domain model on the average?

The `mix` task with two domains, 3-digit addition and 3-digit subtraction, each warm-started with
its systematic mistake (a dropped carry, a skipped borrow) in a share of the demonstrations. One
warm start on the mix is the base of every arm. RL arms, same budget per run (steps x 128
samples): `add` alone, `sub` alone, and `mixed` (both, balanced in every batch). The two
single-domain finals are then merged against the base by each `rlvr merge` method, and are the
teachers of `mixed_distilled`: a mixed run whose samples of each domain also get that domain's
specialist's per-token log pi_teacher - log pi_policy (`methods.direct_opd.domain_teachers`, multi-teacher
on-policy distillation). Every model is scored on both domains' held-out sets (greedy, and
pass@1 from eval_k samples).

Prints one JSON object: per model, greedy accuracy and pass@1 per domain and their average, and
the RL wall seconds behind it (a merge or a distilled run costs both single-domain runs too);
with the CPU, date and versions.

    python benchmarks/methods/mix_merge.py [--steps 30] [--seed 0] [--methods average ties ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rlvr.config import load_config
from rlvr.models.loading import load_model
from rlvr.models.merging import MERGES, MergeSettings, merge_checkpoints
from rlvr.rollout.build import make_runner
from rlvr.train.components import build_components
from rlvr.train.evaluate import evaluate

from runs import report, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "mix.toml"
DOMAINS = {
    "add": "{name: arithmetic, operations: [add]}",
    "sub": "{name: arithmetic, operations: [sub]}",
}


def domains(*names: str) -> str:
    return "task.domains={" + ", ".join(f"{n}: {DOMAINS[n]}" for n in names) + "}"


def score(model, tokenizer, seed: int) -> dict:
    """Greedy accuracy and pass@1 on each domain's held-out set, and their means."""
    cfg = load_config(RECIPE, [domains(*DOMAINS), f"train.seed={seed}"])
    components = build_components(cfg)
    runner = make_runner(cfg, model, tokenizer, components)
    metrics = evaluate(runner, components.task.eval_problems(), cfg.train.eval_k, seed)
    out = {}
    for key in ("accuracy", "pass@1"):
        per_domain = {d: round(metrics[f"eval/domain/{d}/{key}"], 4) for d in DOMAINS}
        out[key] = {**per_domain, "mean": round(sum(per_domain.values()) / len(DOMAINS), 4)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", nargs="+", default=list(MERGES), choices=list(MERGES))
    args = parser.parse_args()
    base_path = warm_start(RECIPE, [domains(*DOMAINS)])
    models = {"base": {**score(*load_model(base_path), args.seed), "rl_seconds": 0.0}}
    finals, seconds = {}, {}
    with tempfile.TemporaryDirectory() as run_dir:
        for arm, names in {"add": ["add"], "sub": ["sub"], "mixed": list(DOMAINS)}.items():
            trained = train_arm(RECIPE, [
                domains(*names), f"model.name={base_path}", f"train.steps={args.steps}",
                f"train.seed={args.seed}",
            ], run_dir, arm)  # fmt: skip
            trainer = trained.trainer
            models[arm] = {**score(trainer.model, trainer.tokenizer, args.seed),
                           "rl_seconds": trained.wall_seconds}  # fmt: skip
            finals[arm], seconds[arm] = str(trainer.run_dir.final), trained.wall_seconds
        teachers = (
            f"methods.direct_opd.domain_teachers={{add: {finals['add']}, sub: {finals['sub']}}}"
        )
        distilled = train_arm(RECIPE, [
            domains(*DOMAINS), f"model.name={base_path}", f"train.steps={args.steps}",
            f"train.seed={args.seed}", teachers,
        ], run_dir, "distilled")  # fmt: skip
        models["mixed_distilled"] = {
            **score(distilled.trainer.model, distilled.trainer.tokenizer, args.seed),
            "rl_seconds": round(seconds["add"] + seconds["sub"] + distilled.wall_seconds, 1),
        }
        for method in args.methods:
            out = Path(run_dir) / f"merged-{method}"
            settings = MergeSettings(weights=(1.0, 1.0), seed=args.seed)
            merge_checkpoints(base_path, [finals["add"], finals["sub"]], method, settings, out)
            models[f"merge_{method}"] = {
                **score(*load_model(str(out)), args.seed),
                "rl_seconds": round(seconds["add"] + seconds["sub"], 1),
            }
    report("mix_merge", RECIPE, models, domains=list(DOMAINS), steps=args.steps, seed=args.seed)


if __name__ == "__main__":
    main()
