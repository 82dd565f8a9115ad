"""How reliably each framework turns steps into accuracy: rlvr against TRL's GRPOTrainer on the
built-in tasks, several seeds each, from the same warm start.

For each task and seed both frameworks train the task's warm-started tiny model (built once per
task, saved as a Hugging Face directory) on the same prompts through the same chat template,
with the same reward function, completions per step, group size, lengths, lr, schedule,
temperature and KL coefficient, each in its own process (vs_trl.py's children; the seed is
train.seed, which both read). Every --eval-every steps each side's model is scored by rlvr's
eval: greedy accuracy, pass@1 and pass@k (k = train.eval_k) and response length on the task's
held-out problems. Prints one JSON object: per task and framework, each seed's curves, the mean
and spread of greedy accuracy and the mean pass@1 at every eval, the median seconds per step,
the seconds of training to each eval, and whether the best accuracy held to the last eval
(within 0.05); and the race: per seed, each side's greedy accuracy at its last eval within the
wall time both ran. --rlvr-steps gives rlvr more steps than TRL's --steps, to fill the same
wall time. --plot writes greedy accuracy (mean and min-max band over seeds) and pass@1 against
seconds of training.

TRL is a benchmark extra, never a runtime dependency: pip install -c constraints.txt -e '.[bench]'

Tasks: arithmetic, countdown, and hard/<name> for each of examples/hard/'s settings. TRL's
GRPOTrainer trains single-turn completions, so the multi-turn games (hard/nim,
hard/guess_number) run with --frameworks rlvr.

    python benchmarks/learning.py [--tasks countdown hard/multiply] [--seeds 0 1 2] [--steps 100]
                                  [--eval-every 10] [--rlvr-steps 130] [--frameworks rlvr trl]
                                  [--plot learning.png]
                                  [-- section.key=value ...]

The `--` ends --tasks' and --frameworks' lists, which would otherwise take the overrides.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))
from vs_trl import cpu_model, run_child, shared_setup  # noqa: E402


def file_overrides(path: Path) -> list[str]:
    """A TOML config as dotted overrides (a child process reads no config file); text as typed,
    since a text field keeps its quotes, anything else as JSON, which parses as YAML."""
    from rlvr.config import read_file

    return [
        f"{section}.{key}={value if isinstance(value, str) else json.dumps(value)}"
        for section, values in read_file(path).items()
        for key, value in values.items()
    ]


# Each task as overrides of the default config: countdown is examples/countdown.toml's setting,
# hard/* are examples/hard/'s (benchmarks/difficulty.py measures their bases).
EXAMPLES = Path(__file__).parents[1] / "examples"
TASKS = {
    "arithmetic": [],
    "countdown": file_overrides(EXAMPLES / "countdown.toml"),
    **{f"hard/{path.stem}": file_overrides(path) for path in sorted(EXAMPLES.glob("hard/*.toml"))},
}
COMMON = ["train.lr_schedule=constant", "train.eval_k=4"]


def curves(seeds: list[dict]) -> dict:
    """Mean and spread over seeds of each eval's greedy accuracy, mean pass@1, and training
    seconds to it."""
    steps = sorted(int(s) for s in seeds[0]["eval_by_step"])
    accuracy = [[r["eval_by_step"][str(s)]["eval/accuracy"] for r in seeds] for s in steps]
    pass1 = [
        statistics.fmean(r["eval_by_step"][str(s)]["eval/pass@1"] for r in seeds) for s in steps
    ]
    seconds = [statistics.fmean(sum(r["step_seconds"][:s]) for r in seeds) for s in steps]
    held = [
        max(curve) - curve[-1] <= 0.05
        for curve in ([r["eval_by_step"][str(s)]["eval/accuracy"] for s in steps] for r in seeds)
    ]
    return {
        "steps": steps,
        "accuracy_mean": [round(statistics.fmean(a), 4) for a in accuracy],
        "accuracy_min": [min(a) for a in accuracy],
        "accuracy_max": [max(a) for a in accuracy],
        "pass1_mean": [round(p, 4) for p in pass1],
        "train_seconds": [round(s, 1) for s in seconds],
        "seconds_per_step_median": round(
            statistics.median(t for r in seeds for t in r["step_seconds"][1:]), 3
        ),
        "best_held_on_every_seed": all(held),
    }


def race(runs: dict[str, list[dict]]) -> dict:
    """Who is ahead at equal wall time. Per seed: the training seconds both sides ran (the
    shorter run's), and each side's greedy accuracy at its last eval within them (the model a
    user holds then) and its best one (which favours the side with more evals in the time), and
    the last one's pass@1 (every eval samples with the same seeds, so the two compare alike)."""
    budgets = []
    last, best, last_pass1 = ({name: [] for name in runs} for _ in range(3))
    for seeds in zip(*runs.values()):
        budget = min(sum(r["step_seconds"]) for r in seeds)
        budgets.append(round(budget, 1))
        for name, r in zip(runs, seeds):
            within = [
                e
                for step, e in sorted(r["eval_by_step"].items(), key=lambda item: int(item[0]))
                if sum(r["step_seconds"][: int(step)]) <= budget
            ]
            last[name].append(within[-1]["eval/accuracy"])
            best[name].append(max(e["eval/accuracy"] for e in within))
            last_pass1[name].append(round(within[-1].get("eval/pass@1", float("nan")), 3))
    out = {"budget_seconds": budgets, "last_within": last, "best_within": best,
           "last_pass1_within": last_pass1}  # fmt: skip
    if set(runs) == {"rlvr", "trl"}:
        out["rlvr_ahead_on_every_seed"] = all(a > b for a, b in zip(last["rlvr"], last["trl"]))
    return out


def plot(results: dict, path: str) -> None:
    """Per task, greedy accuracy (mean and min-max band over seeds) and mean pass@1 against the
    seconds of training to each eval, the axis on which the frameworks race."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(5.5 * len(results), 6.4), squeeze=False)
    for column, (task, frameworks) in enumerate(results.items()):
        greedy, sampled = axes[0][column], axes[1][column]
        for name, result in frameworks.items():
            c = result["summary"]
            seconds = c["train_seconds"]
            greedy.plot(seconds, c["accuracy_mean"], marker=".", label=name)
            greedy.fill_between(seconds, c["accuracy_min"], c["accuracy_max"], alpha=0.2)
            sampled.plot(seconds, c["pass1_mean"], marker=".", label=name)
        greedy.set(title=task, ylabel="greedy accuracy (held-out)", ylim=(0, None))
        sampled.set(xlabel="seconds of training", ylabel="pass@1 (held-out)", ylim=(0, None))
        greedy.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument(
        "--rlvr-steps", type=int,
        help="rlvr's steps (default --steps): more, to fill the wall time TRL's --steps take",
    )  # fmt: skip
    parser.add_argument(
        "--frameworks", nargs="+", choices=["rlvr", "trl"], default=["rlvr", "trl"],
        help="TRL's GRPOTrainer trains single-turn completions: leave it out for multi-turn games",
    )  # fmt: skip
    parser.add_argument("--plot", help="write the curves to this PNG")
    parser.add_argument("overrides", nargs="*", help="section.key=value for every task, after --")
    args = parser.parse_args()
    results: dict[str, dict] = {}
    races: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as work:
        for task in args.tasks:
            overrides = TASKS[task] + COMMON + args.overrides
            cfg, components, display, load_policy = shared_setup(overrides)
            model, tokenizer = load_policy(cfg, components, display)  # the warm start, cached
            model_dir = f"{work}/{task}-model"
            model.save_pretrained(model_dir)
            tokenizer.save_pretrained(model_dir)
            runs: dict[str, list[dict]] = {name: [] for name in args.frameworks}
            for seed in args.seeds:
                for framework in runs:
                    out = f"{work}/{task}-{framework}-{seed}"
                    seeded = [*overrides, f"train.seed={seed}"]
                    steps = (args.rlvr_steps if framework == "rlvr" else None) or args.steps
                    run = run_child(framework, model_dir, out, steps, args.eval_every, seeded)
                    runs[framework].append(run)
                    # One line per finished run on stderr, so a cut-short sweep keeps its results.
                    accuracy = {s: e["eval/accuracy"] for s, e in run["eval_by_step"].items()}
                    line = {"task": task, "framework": framework, "seed": seed}
                    print(json.dumps({**line, "accuracy_by_step": accuracy}), file=sys.stderr)
            results[task] = {
                name: {"summary": curves(seeds), "seeds": seeds} for name, seeds in runs.items()
            }
            races[task] = race(runs)
    if args.plot:
        plot(results, args.plot)
    import trl

    print(json.dumps({
        "benchmark": "learning", "cpu": cpu_model(), "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "trl": trl.__version__, "steps": args.steps, "eval_every": args.eval_every,
        "rlvr_steps": args.rlvr_steps or args.steps, "seeds": args.seeds, "results": results,
        "race": races,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
