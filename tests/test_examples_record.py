"""Every example trains two steps with the same loss, reward, grad norm and KL as the stored
record: a refactor of the loop that changes any of its arithmetic fails here.

RLVR_RECORD=1 pytest tests/test_examples_record.py -n 0  rewrites the record; a record that has
to change is a behaviour change and needs its own reason in the commit.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from rlvr.api import run
from rlvr.config import load_config
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.train.components import build_task

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "records" / "examples.json"
# Clocks, throughput and FLOPs vary by machine; every other metric is the loop's arithmetic.
MACHINE = ("time/", "tokens_per_sec/", "flops", "utilisation/", "rollout/")
EXAMPLES = sorted(
    p
    for p in [*(ROOT / "examples").glob("*.toml"), *(ROOT / "examples" / "recipes").glob("*.toml")]
)
# A hub model cannot load here (tests/e2e/test_real_model.py trains a local Qwen2 instead).
LEFT_OUT = {"real_model.toml": "loads a hub model"}
# Settings that let a method act within two steps.
EXTRA = {
    "rfpo.toml": [
        "methods.rfpo.label_steps=1",
        "methods.rfpo.calibration_rollouts=8",
        "algo.critic_warmup_steps=0",
    ],  # fmt: skip
    "poise.toml": ["methods.poise.bootstrap_steps=1"],
    "river.toml": ["methods.river.pool=32"],
}


def dense_reward(cfg) -> list[str]:
    """Graded credit against the reference answer, where the example has none of its own: a warm
    start of a few steps solves little, and a group of equal rewards has no advantage."""
    task = build_task(cfg)
    plain = task.verifier is not None and not getattr(task, "verifiers", None)
    if cfg.task.rewards or cfg.cohort.members or not plain or not task.train_problem(0).answer:
        return []
    return ['task.rewards={"levenshtein": 1.0}']


# Models a recipe asks the user to make first (W2SPO's weak model, Direct-OPD's teacher and its
# start): untrained nano models of other seeds (as tests/methods/ use) exercise the same
# arithmetic.
MADE = {
    "w2spo.toml": {"methods.w2spo.model": 1},
    "direct_opd.toml": {"methods.direct_opd.teacher": 1, "methods.direct_opd.teacher_ref": 2},
}


def made_models(name: str, directory: Path) -> list[str]:
    tokenizer = build_tokenizer()
    overrides = []
    for key, seed in MADE.get(name, {}).items():
        build_model("nano", tokenizer, seed=seed).save_pretrained(directory / key)
        tokenizer.save_pretrained(directory / key)
        overrides.append(f"{key}={directory / key}")
    return overrides


def small(path: Path, runs: Path) -> list[str]:
    """Overrides that shrink an example to a short warm start, two prompts a step and two RL
    steps, without evals: the loop's arithmetic, not learning. The recipes share one warm start
    on one-digit sums, long enough that some replies are right (what RepExp, RGPO, RFPO and the
    River screen act on)."""
    recipe = path.parent.name == "recipes"
    warm = ["task.digits=1", "model.pretrain_steps=80", "model.pretrain_batch_size=16"]
    base = [*(warm if recipe else ["model.pretrain_steps=4", "model.pretrain_batch_size=8"])]
    cfg = load_config(path, [*base, "task.eval_size=2"])
    group = cfg.rollout.group_size
    return [
        *base,
        *dense_reward(cfg),
        f"rollout.batch_size={2 * group}",
        f"rollout.max_new_tokens={min(cfg.rollout.max_new_tokens, 32)}",
        "task.eval_size=2",
        "train.steps=2",
        "train.eval_every=0",
        "train.eval_k=1",
        "train.save_every=0",
        f"train.micro_batch_size={2 * group}",
        f"log.run_dir={runs}",
        "log.quiet=true",
        "log.report=false",
        *EXTRA.get(path.name, []),
    ]


def replay(path: Path, runs: Path, extra: list[str]) -> list[dict[str, float]]:
    """Each RL step's recorded metrics, over every policy the example trains (in path order)."""
    torch.set_num_threads(1)  # the same float reductions on every machine and worker count
    run(path, *small(path, runs), *extra)
    steps = []
    for metrics in sorted(runs.rglob("metrics.jsonl")):
        for line in metrics.read_text().splitlines():
            record = json.loads(line)
            if record["step"] > 0 and "reward" in record:
                steps.append({k: v for k, v in record.items() if not k.startswith(MACHINE)})
    return steps


def stored() -> dict:
    return json.loads(RECORD.read_text()) if RECORD.is_file() else {}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_matches_its_record(path, rlvr_home, tmp_path, monkeypatch):
    if path.name in LEFT_OUT:
        pytest.skip(LEFT_OUT[path.name])
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))
    monkeypatch.chdir(ROOT)  # example data paths are relative to the repo root
    name = f"{path.parent.name}/{path.name}"
    extra = made_models(path.name, tmp_path / "made")
    steps = replay(path, tmp_path / "runs", extra)
    assert steps, f"{name} logged no step"
    if os.environ.get("RLVR_RECORD"):
        with FileLock(f"{RECORD}.lock"):  # xdist workers write their examples in turn
            record = stored()
            record[name] = steps
            RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        return
    expected = stored().get(name)
    assert expected is not None, f"no record of {name}: RLVR_RECORD=1 writes one"
    assert len(steps) == len(expected), (
        f"{name}: {len(steps)} steps, the record has {len(expected)}"
    )
    for i, (got, want) in enumerate(zip(steps, expected)):
        assert got.keys() == want.keys(), (
            f"{name} step {i}: metrics {sorted(got)} vs {sorted(want)}"
        )
        for key, value in want.items():
            same = math.isnan(value) and math.isnan(got[key])  # e.g. a share of no samples
            assert same or math.isclose(got[key], value, rel_tol=1e-3, abs_tol=1e-5), (
                f"{name} step {i}: {key} = {got[key]}, the record has {value}"
            )
