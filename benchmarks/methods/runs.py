"""One arm of a methods benchmark: a recipe plus overrides, trained quietly from a shared warm
start, with its metrics read back."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from machine import machine

from rlvr.config import load_config
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.tokens import encode_prompt
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.train.warmstart import ensure_warm_start

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Arm:
    summary: dict
    records: list[dict]  # metrics.jsonl, one object per step (and the base eval at step 0)
    wall_seconds: float
    trainer: Trainer  # the finished run, for measurements on its final policy

    def by_step(self, key: str) -> dict[int, float]:
        return {r["step"]: round(r[key], 4) for r in self.records if key in r}

    def mean(self, key: str) -> float | None:
        """The mean of a training-step metric over the steps that logged it."""
        values = [r[key] for r in self.records if "reward" in r and key in r]
        return round(statistics.fmean(values), 4) if values else None


def warm_start(recipe: Path, overrides: list[str]) -> str:
    """The task's seed-0 warm start (built once, cached): every arm and seed starts from it, so
    a seed varies only the RL run."""
    cfg = load_config(recipe, overrides)
    return str(ensure_warm_start(cfg, build_components(cfg).task))


def train_arm(recipe: Path, overrides: list[str], run_dir: str, name: str) -> Arm:
    quiet = [f"log.run_dir={run_dir}", f"log.name={name}", "log.quiet=true", "train.save_every=0"]
    trainer = Trainer(load_config(recipe, [*overrides, *quiet]))
    start = time.perf_counter()
    summary = trainer.run()
    wall = time.perf_counter() - start
    return Arm(summary, trainer.run_dir.read_metrics(), round(wall, 1), trainer)


def sample_texts(model, tokenizer, problems, k: int, max_new_tokens: int) -> list[str]:
    """k replies per problem (temperature 1, seeded 0.., problem-major), as text."""
    prompts = [encode_prompt(tokenizer, p.messages()) for p in problems for _ in range(k)]
    replies = HFEngine(model, tokenizer).generate(
        prompts, SamplingParams(max_new_tokens, 1.0), seeds=list(range(len(prompts)))
    )
    return [c.text for c in replies]


def run_all(
    arms: Iterable[str], seeds: list[int], run_arm: Callable[[str, int, str], dict]
) -> dict[str, dict[int, dict]]:
    """{arm: {seed: run_arm(arm, seed, run_dir)}}, every run in one temporary directory."""
    with tempfile.TemporaryDirectory() as run_dir:
        return {arm: {seed: run_arm(arm, seed, run_dir) for seed in seeds} for arm in arms}


def report(benchmark: str, recipe: Path, arms: dict, **fields) -> None:
    """Print the benchmark's one JSON object, with the machine it ran on."""
    head = {"benchmark": f"methods/{benchmark}", "recipe": str(recipe.relative_to(ROOT))}
    print(json.dumps({**head, **fields, "arms": arms, **machine()}))
