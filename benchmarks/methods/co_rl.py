"""Co-RL (arXiv 2608.17253): two policies that share no parameters, each rewarded for agreeing
with the other's majority answer, with no label read.

On `target_string` with a decoy: each member's warm start says the target or one wrong answer,
in proportions set by model.pretrain_flawed_share. The paper's two-agent analysis predicts
convergence to the right answer when p_A + p_B > 1 and to the wrong one when it is below 1,
with TTRL's self-majority moving each member along sign(p - 1/2) alone. Arms, same budget:
`peer_above` (p ~0.87 and ~0.27), `self_above` (TTRL on the same pair), `label_above` (the
verifier, for scale), `peer_below` (p ~0.26 and ~0.27), `peer_above_paraphrased` (`peer_above`
with the second member reading every prompt reworded, `task.paraphrase`).

Prints one JSON object: per arm and member, the base and final held-out pass@1 and greedy
accuracy, the last step's agreement and pseudo-label accuracy, wall seconds; with the CPU, date
and versions.

Seed s gives the members train.seed 2s and 2s + 1, so each seed redraws both warm starts (and
with them the members' priors, which the output reports) and both RL runs.

    python benchmarks/methods/co_rl.py [--steps 40] [--seeds 0 1 2] [--arms peer_above ...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rlvr.config import load_config
from rlvr.methods.cohort import Cohort

from runs import report

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "co_rl.toml"
STRONG, WEAK = 0.15, 0.7  # flawed shares: the warm start says the decoy in this share of replies
ARMS = {
    "peer_above": ("peer", STRONG, WEAK),
    "self_above": ("self", STRONG, WEAK),
    "label_above": ("label", STRONG, WEAK),
    "peer_below": ("peer", WEAK, WEAK),
    # the paper's diversity knob: the second member reads every prompt reworded
    "peer_above_paraphrased": ("peer", STRONG, WEAK, True),
}


def run_arm(
    reward: str, first: float, second: float, paraphrase: bool = False, *,
    seed: int, steps: int, run_dir: str, name: str,
):  # fmt: skip
    reworded = ', "task.paraphrase": true' if paraphrase else ""
    members = (
        f'cohort.members=[{{"train.seed": {2 * seed}, "model.pretrain_flawed_share": {first}}}, '
        f'{{"train.seed": {2 * seed + 1}, "model.pretrain_flawed_share": {second}{reworded}}}]'
    )
    overrides = [
        members, f"cohort.reward={reward}", f"train.steps={steps}", f"log.run_dir={run_dir}",
        f"log.name={name}-{seed}", "log.quiet=true",
    ]  # fmt: skip
    run = Path(run_dir, f"{name}-{seed}")
    start = time.perf_counter()
    summary = Cohort(load_config(RECIPE, overrides)).run()
    result = {"wall_seconds": round(time.perf_counter() - start, 1), "members": []}
    for index, member in enumerate(summary["members"]):
        lines = (run / f"member-{index}" / "metrics.jsonl").read_text().splitlines()
        last = [r for r in map(json.loads, lines) if "cohort/agreement" in r][-1]
        result["members"].append({
            "base_pass@1": member["base_eval"]["eval/pass@1"],
            "final_pass@1": member["final_eval"]["eval/pass@1"],
            "base_greedy": member["base_eval"]["eval/accuracy"],
            "final_greedy": member["final_eval"]["eval/accuracy"],
            "last_agreement": last["cohort/agreement"],
            "last_label_accuracy": last["cohort/label_accuracy"],
        })  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        seeds = {
            f"seed {seed}": {
                arm: run_arm(*ARMS[arm], seed=seed, steps=args.steps, run_dir=run_dir, name=arm)
                for arm in args.arms
            }
            for seed in args.seeds
        }
    report("co_rl", RECIPE, seeds, steps=args.steps)


if __name__ == "__main__":
    main()
