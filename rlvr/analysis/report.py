"""The run report: a PNG of training reward, accuracy and held-out eval accuracy over steps."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs happen on servers
import matplotlib.pyplot as plt  # noqa: E402


def plot_run(records: list[dict], path: Path, title: str = "") -> Path:
    """Two panels from metrics.jsonl records: reward/accuracy per step, and eval accuracy."""
    train = [r for r in records if "reward" in r]
    evals = [r for r in records if "eval/accuracy" in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if train:
        steps = [r["step"] for r in train]
        left.plot(steps, [r["reward"] for r in train], label="reward (mean)")
        left.plot(
            steps, [r["accuracy"] for r in train], label="train accuracy (sampled)", alpha=0.7
        )
    left.set(xlabel="step", title="training batch")
    left.legend(loc="lower right")
    if evals:
        steps = [r["step"] for r in evals]
        right.plot(steps, [r["eval/accuracy"] for r in evals], marker="o", label="greedy accuracy")
        for key in sorted({k for r in evals for k in r if k.startswith("eval/pass@")}):
            right.plot(steps, [r.get(key, float("nan")) for r in evals], marker=".", label=key[5:])
    right.set(xlabel="step", ylim=(0, 1.02), title="held-out eval")
    right.legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
