"""The registry of runners: each config trains with the runner it asks for (one Trainer when it
asks for none), two at once are refused, and an installed package's runner is picked too."""

import pytest

from rlvr.api import runner
from rlvr.config import ConfigError, load_config
from rlvr.methods.runners import RUNNERS
from rlvr.train.trainer import Trainer

MEMBERS = 'cohort.members=[{}, {"train.seed": 1}]'
ASKS = {
    "cohort": [MEMBERS],
    "debate": ["debate.rounds=2", "model.lora.r=4"],
    "rspo": ["algo.rspo_explorer=true", "algo.tis=token"],
}


def test_every_runner_is_picked_for_its_config_and_a_trainer_otherwise():
    assert set(ASKS) == set(RUNNERS)
    for name, overrides in ASKS.items():
        assert runner(load_config(None, overrides)) is RUNNERS[name]
    assert runner(load_config(None, ["methods.repexp={}"])) is Trainer


def test_two_runners_at_once_are_refused_naming_both_and_what_asks_for_them():
    cfg = load_config(None, [*ASKS["cohort"], *ASKS["debate"]])
    with pytest.raises(ConfigError, match="asks for 2 runners") as refused:
        runner(cfg)
    message = str(refused.value)
    assert "cohort: Co-RL (`cohort.members`)" in message
    assert "debate: MADA-RL (`debate.rounds`)" in message
    assert "fix: turn off" in message


class Solo:
    """Trains alone, when the run is named 'solo'."""

    @classmethod
    def chosen(cls, cfg):
        return cfg.log.name == "solo"


def test_a_runner_that_clashes_with_a_built_in_is_refused_too(monkeypatch):
    monkeypatch.setitem(RUNNERS, "solo", Solo)
    assert runner(load_config(None, ["log.name=solo"])) is Solo
    with pytest.raises(ConfigError, match="rspo: RSPO.*\n.*solo: Trains alone"):
        runner(load_config(None, ["log.name=solo", *ASKS["rspo"]]))


def test_an_installed_packages_runner_is_picked_and_a_built_in_name_stays_built_in(
    tmp_path, monkeypatch
):
    info = tmp_path / "my_runner-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-runner\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[rlvr.runners]\nmine = my_runner:Mine\ncohort = my_runner:Mine\n"
    )
    (tmp_path / "my_runner.py").write_text(
        "class Mine:\n"
        "    @classmethod\n"
        "    def chosen(cls, cfg):\n"
        "        return cfg.log.name == 'mine'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert runner(load_config(None, ["log.name=mine"])).__module__ == "my_runner"
    assert runner(load_config(None, ASKS["cohort"])) is RUNNERS["cohort"]
    assert runner(load_config(None, [])) is Trainer
