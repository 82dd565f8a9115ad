"""How step time grows with work, for rlvr and TRL's GRPOTrainer: group size, prompts per step
and the response budget doubled in turn from the default shape (16 prompts x 8, 48 tokens).

Each point runs both frameworks in turn, each in its own process, through vs_trl.py's child
runs (same warm-started model, prompts, reward, lr and settings). Prints one JSON object
(median seconds per step after the first, generated tokens per step, the rlvr / TRL ratio, per
point) and writes the plot to --plot.

    python benchmarks/scaling.py [--steps 5] [--factors 1 2 4] [--plot scaling.png]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from vs_trl import COMMON, cpu_model, run_child, shared_setup  # noqa: E402

BASE = {"prompts": 16, "group_size": 8, "max_new_tokens": 48}


def overrides(shape: dict[str, int]) -> list[str]:
    return [
        *COMMON,
        f"rollout.batch_size={shape['prompts'] * shape['group_size']}",
        f"rollout.group_size={shape['group_size']}",
        f"rollout.max_new_tokens={shape['max_new_tokens']}",
        f"train.micro_batch_size={min(64, shape['prompts'] * shape['group_size'])}",
    ]


def run_point(framework: str, model_dir: str, work: str, steps: int, shape: dict) -> dict:
    name = "-".join(f"{k}{v}" for k, v in shape.items())
    run = run_child(framework, model_dir, f"{work}/{framework}-{name}", steps, steps,
                    overrides(shape))  # fmt: skip
    return {
        "seconds_per_step_median": round(statistics.median(run["step_seconds"][1:]), 3),
        "generated_tokens_per_step": round(statistics.fmean(run["generated_tokens"][1:]), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=5, help="steps per point (the first is not timed)"
    )
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--plot", default="scaling.png")
    args = parser.parse_args()
    cfg, components, display, load_policy = shared_setup(overrides(BASE))
    points: dict[str, list[dict]] = {dimension: [] for dimension in BASE}
    with tempfile.TemporaryDirectory() as work:
        model, tokenizer = load_policy(cfg, components, display)  # the warm start, cached
        model.save_pretrained(f"{work}/model")
        tokenizer.save_pretrained(f"{work}/model")
        base = None
        for dimension in BASE:
            for factor in args.factors:
                shape = dict(BASE, **{dimension: BASE[dimension] * factor})
                if factor == 1 and base is not None:
                    point = base  # the default shape, measured once for all three curves
                else:
                    point = {"shape": shape, **{
                        framework: run_point(framework, f"{work}/model", work, args.steps, shape)
                        for framework in ("rlvr", "trl")
                    }}  # fmt: skip
                    point["step_time_rlvr_over_trl"] = round(
                        point["rlvr"]["seconds_per_step_median"]
                        / point["trl"]["seconds_per_step_median"], 3
                    )  # fmt: skip
                    base = base or (point if factor == 1 else None)
                points[dimension].append(dict(point, factor=factor))
    figure, axes = plt.subplots(1, len(BASE), figsize=(4 * len(BASE), 3.2), sharey=True)
    for axis, (dimension, series) in zip(axes, points.items()):
        x = [p["shape"][dimension] for p in series]
        for framework in ("rlvr", "trl"):
            axis.plot(x, [p[framework]["seconds_per_step_median"] for p in series], "o-",
                      label=framework)  # fmt: skip
        axis.set_xscale("log", base=2)
        axis.set_xlabel(dimension)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("seconds per step (median)")
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(args.plot, dpi=120)
    import trl

    print(json.dumps({
        "benchmark": "scaling", "cpu": cpu_model(), "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "trl": trl.__version__, "steps": args.steps, "plot": args.plot, "points": points,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
