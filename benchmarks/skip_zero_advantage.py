"""The update with and without skipping rows whose advantages are all 0 (train.skip_zero_advantage).

Builds two Trainers from one config that differ only in train.skip_zero_advantage and steps them
in turn in this process (which goes first alternates from step to step, so drift in the
machine's speed falls on both). Both start from the same weights and seed, and the skip changes
only the order of float sums, so they sample the same replies for as long as their weights agree
to rounding: the JSON reports how far apart the weights ended. Prints one JSON object: median
seconds per step and per update for each, their ratios, the mean share of rows skipped, and the
mean reward of each run.

    python benchmarks/skip_zero_advantage.py [--config examples/hard/countdown.toml]
                                             [--steps 20] [section.key=value ...]

Without --config it runs the embedded default (what `rlvr train` runs). The overrides default
to algo.kl_coef=0: a KL term in the loss reads every row, so then nothing is skipped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from rlvr.config import load_config
from rlvr.train.trainer import Trainer

sys.path.insert(0, str(Path(__file__).parent))
from engine_decode import cpu_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("overrides", nargs="*", default=["algo.kl_coef=0"])
    args = parser.parse_args()
    times: dict[str, dict[str, list[float]]] = {}
    skipped, rewards = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {
            skip: Trainer(load_config(args.config, [
                *args.overrides, f"train.skip_zero_advantage={skip}", "log.quiet=true",
                f"log.run_dir={tmp}/{skip}", "train.eval_every=0", "train.save_every=0",
            ]))
            for skip in ("true", "false")
        }  # fmt: skip
        for skip in trainers:
            times[skip] = {"step": [], "update": []}
            rewards[skip] = []
        for step in range(args.steps + 1):  # step 0 warms both up and is not counted
            order = list(trainers) if step % 2 else list(trainers)[::-1]
            for skip in order:
                trainer = trainers[skip]
                start = time.perf_counter()
                metrics = trainer.step()
                seconds = time.perf_counter() - start
                trainer.state["step"] += 1
                if step:
                    times[skip]["step"].append(seconds)
                    times[skip]["update"].append(metrics["time/update"])
                    rewards[skip].append(metrics["reward"])
                    if skip == "true":
                        skipped.append(metrics["skipped_rows"])
        weights = [
            torch.cat([p.detach().flatten() for p in trainers[s].model.parameters()])
            for s in trainers
        ]
    median = {s: {k: statistics.median(v) for k, v in t.items()} for s, t in times.items()}
    print(json.dumps({
        "benchmark": "skip_zero_advantage", "cpu": cpu_model(), "threads": torch.get_num_threads(),
        "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "transformers": transformers.__version__, "config": args.config,
        "overrides": args.overrides, "steps": args.steps,
        "median_seconds": {f"skip={s}": {k: round(v, 4) for k, v in m.items()}
                           for s, m in median.items()},
        "update_ratio": round(median["true"]["update"] / median["false"]["update"], 3),
        "step_ratio": round(median["true"]["step"] / median["false"]["step"], 3),
        "skipped_rows_mean": round(statistics.fmean(skipped), 3),
        "reward_mean": {f"skip={s}": round(statistics.fmean(r), 4) for s, r in rewards.items()},
        "max_weight_difference": float((weights[0] - weights[1]).abs().max()),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
