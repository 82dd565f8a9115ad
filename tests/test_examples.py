from pathlib import Path

import pytest

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.losses import LOSSES
from rlvr.config import config_reference, load_config
from rlvr.methods import METHODS
from rlvr.rewards import REWARDS
from rlvr.tasks import TASKS
from rlvr.train.components import build_components

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
