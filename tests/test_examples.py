from pathlib import Path

import pytest

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.losses import LOSSES
from rlvr.config import config_reference, load_config, read_file
from rlvr.methods import METHODS
from rlvr.rewards import REWARDS
from rlvr.tasks import TASKS
from rlvr.train.components import build_components, build_task
from rlvr.train.warmstart import pretrain_batch_size

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "examples").rglob("*.toml")), ids=lambda p: p.name)
def test_every_example_config_resolves(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # example data paths are relative to the repo root
    components = build_components(load_config(path))
    assert components.task.eval_problems()


def test_one_example_per_builtin_task():
    names = {load_config(p).task.name for p in (ROOT / "examples").glob("*.toml")}
    assert set(TASKS) <= names


def test_config_reference_is_current():
    assert (ROOT / "docs" / "config.md").read_text().strip() == config_reference(
        TASKS, REWARDS, METHODS, ADVANTAGES, LOSSES
    ).strip()


def test_the_arithmetic_example_is_the_default_run_spelled_out():
    """examples/arithmetic.toml says it is `rlvr train` with no arguments: every key it sets
    holds what the default run resolves to, so a change of default that forgets it fails here."""
    default = load_config(None)
    task = build_task(default)
    for section, values in read_file(ROOT / "examples" / "arithmetic.toml").items():
        for key, value in values.items():
            if section == "task" and key in type(task.params).model_fields:
                resolved = getattr(task.params, key)
            elif (section, key) == ("model", "pretrain_batch_size"):
                resolved = pretrain_batch_size(default, task)
            else:
                resolved = getattr(getattr(default, section), key)
            assert resolved == value, (
                f"{section}.{key}: the example sets {value}, the default {resolved}"
            )
