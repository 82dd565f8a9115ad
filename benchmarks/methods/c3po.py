"""3PO / C3PO (arXiv 2608.09805): with the adapters trained by IVON and each group's replies
sampled over draws of its posterior, does sigma vary across weights as the paper's does, are
fewer groups left without a learning signal than under GRPO, and what happens to accuracy?

Every arm starts from the seed-0 warm start of the default task, rank-8 LoRA adapters.
`grpo`: AdamW at lr 1e-3, no weight noise (methods.c3po=null, no IS mask). `c3po`:
examples/recipes/c3po.toml, IVON (lambda 1e9), 2 weight draws per step each sampling half of
every group, trained through the sequence-level IS mask [0.5, 2]. `c3po_n4`: 4 draws of 2.

Prints one JSON object: per arm and seed, the share of uniform groups (every reply scored
alike), held-out greedy accuracy and pass@1 along the run, the share of policy tokens the IS
mask dropped, the quantiles of sigma over the adapters' weights at the end (and the prior's
sigma), seconds per step and wall seconds; with the CPU, date and versions.

    python benchmarks/methods/c3po.py [--steps 30] [--eval-every 10] [--seeds 0 1 2]
        [--arms grpo c3po c3po_n4] [--set methods.c3po.ess=1e7 ...]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from rlvr.methods.c3po import posterior_std

from runs import report, run_all, train_arm, warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "c3po.toml"
ARMS = {
    # after the noise keys: it drops them too
    "grpo": ["methods.c3po=null", "algo.tis=off", "train.lr=1e-3"],
    "c3po": [],
    "c3po_n4": ["methods.c3po.weight_samples=4"],
}
QUANTILES = (0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0)


def sigma_spread(trainer) -> dict | None:
    """sigma over every adapter weight at the end of the run, against the prior's."""
    posterior = trainer.source.noise
    if posterior is None:
        return None
    stds, group = posterior.stds(), posterior.ivon.param_groups[0]
    prior = posterior_std(torch.tensor(group["hess_init"]), group["ess"], group["weight_decay"])
    values = torch.quantile(stds.double(), torch.tensor(QUANTILES, dtype=torch.float64))
    return {
        "prior": round(float(prior), 6),
        "quantiles": {str(q): round(v, 6) for q, v in zip(QUANTILES, values.tolist())},
        "share_off_prior_10pct": round(float(((stds / prior - 1).abs() > 0.1).float().mean()), 4),
        "weights": stds.numel(),
    }


def run_arm(name: str, seed: int, args, run_dir: str, model: str) -> dict:
    arm = train_arm(RECIPE, [
        f"model.name={model}", *ARMS[name], *(args.set if name != "grpo" else []),
        f"train.steps={args.steps}",
        f"train.eval_every={args.eval_every}", f"train.seed={seed}",
    ], run_dir, f"{name}-{seed}")  # fmt: skip
    steps = [r for r in arm.records if "reward" in r]
    result = {
        "uniform_groups": arm.mean("uniform_groups"),
        "uniform_groups_first_10": round(
            statistics.fmean(r["uniform_groups"] for r in steps[:10]), 4
        ),
        "train_accuracy": arm.mean("accuracy"),
        "eval_accuracy_by_step": arm.by_step("eval/accuracy"),
        "eval_pass@1_by_step": arm.by_step("eval/pass@1"),
        "final_accuracy": arm.summary["final_eval"]["eval/accuracy"],
        "final_pass@1": arm.summary["final_eval"]["eval/pass@1"],
        "masked_share": arm.mean("mismatch/masked_share"),
        "sigma": sigma_spread(arm.trainer),
        "seconds_per_step": arm.mean("time/step"),
        "wall_seconds": arm.wall_seconds,
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="*", default=["grpo", "c3po"], choices=list(ARMS))
    parser.add_argument("--set", nargs="*", default=[], help="overrides of the C3PO arms")
    args = parser.parse_args()
    model = warm_start(RECIPE, [])
    arms = run_all(
        args.arms, args.seeds, lambda arm, seed, run_dir: run_arm(arm, seed, args, run_dir, model)
    )
    report("c3po", RECIPE, arms, steps=args.steps, overrides=args.set)


if __name__ == "__main__":
    main()
