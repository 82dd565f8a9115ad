"""Choosing methods: the third-party method docs/hooks.md writes, from a module outside rlvr/,
trains the default task; names, params, moved keys and clashes fail before any work."""

import re
from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.methods import METHODS
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"


def plugin_source() -> str:
    """The method docs/hooks.md writes, as a user would copy it into first_bonus.py."""
    return re.search(r"^```python\n# first_bonus.py\n(.*?)^```", DOCS.read_text(), re.S | re.M)[1]


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "first_bonus.py").write_text(plugin_source())
    monkeypatch.syspath_prepend(str(tmp_path))
    return "first_bonus:FirstBonus"


def first_step(overrides: list[str], methods: dict) -> tuple[Trainer, dict]:
    cfg = load_config(None, overrides, base={"methods": methods})
    trainer = Trainer(cfg)
    try:
        return trainer, trainer.step()
    finally:
        trainer.close()


def test_a_plugin_method_with_its_own_params_trains_the_default_task(plugin, fast_overrides):
    _, plain = first_step(fast_overrides, {})
    trainer, paid = first_step(fast_overrides, {plugin: {"size": 0.5}})
    # the same samples (same seeds), one reply in 4 paid 0.5: the bonus reached the rewards
    assert paid["reward"] == pytest.approx(plain["reward"] + 0.5 / 4, abs=1e-6)
    assert paid["first/paid"] == 4.0  # one reply of each of the 16 / 4 groups
    assert paid["grad_norm"] != plain["grad_norm"]  # and the advantages the update took
    assert trainer.methods.state_dict() == {plugin: {"paid": 4}}


def test_a_method_state_rides_in_the_checkpoint(plugin, fast_overrides, tmp_path):
    overrides = [*fast_overrides, "train.steps=2", "train.save_every=1", "log.name=cut"]
    cfg = load_config(None, overrides, base={"methods": {plugin: {}}})
    trainer = Trainer(cfg)
    trainer.run()
    resumed = Trainer(cfg, resume=trainer.run_dir.path, resume_step=1)
    try:
        assert resumed.methods.chosen[plugin].paid == 4  # as saved after step 1, not 0 or 8
    finally:
        resumed.close()


def test_method_names_params_and_clashes_fail_before_any_work(plugin):
    with pytest.raises(ConfigError, match="Did you mean 'repexp'"):
        build_components(load_config(None, ["methods.repexx={}"]))
    with pytest.raises(ConfigError, match="unknown key 'methods.repexp.betta'"):
        build_components(load_config(None, ["methods.repexp.betta=0.1"]))
    with pytest.raises(ConfigError, match="methods.repexp.beta = -1"):
        build_components(load_config(None, ["methods.repexp.beta=-1"]))
    clash = load_config(None, ["algo.kl_coef=0.1"], base={"methods": {plugin: {}}})
    with pytest.raises(
        ConfigError, match="first_bonus does not take a KL term; fix: algo.kl_coef=0"
    ):
        build_components(clash)


def test_null_turns_off_a_method_a_file_enables():
    on = build_components(load_config(None, ["methods.repexp.beta=0.1"]))
    off = build_components(load_config(None, ["methods.repexp.beta=0.1", "methods.repexp=null"]))
    assert list(on.methods.chosen) == ["repexp"] and not off.methods.chosen


@pytest.mark.parametrize(
    "old, new",
    [
        ("algo.elliptical_beta=0.01", "methods.repexp.beta"),
        ("task.filter=[solvable]", "methods.river.filter"),
        ("algo.rfpo_label_steps=5", "methods.rfpo.label_steps"),
        ("algo.teacher_top_k=4", "methods.direct_opd.top_k"),
        ("rollout.dispatch_threads=true", "methods.parason.dispatch"),
        ("algo.parallel_latency_alpha=0.1", "methods.parason.latency_alpha"),
        ("rollout.branch_model=weak", "methods.w2spo.model"),
        ("algo.weight_noise_floor=0.1", "methods.c3po.prior_precision"),
    ],
)
def test_a_moved_key_names_its_new_home(old, new):
    with pytest.raises(ConfigError, match=f"moved to '{new}'"):
        load_config(None, [old])


def test_every_method_is_documented_and_checks_its_params():
    for name, method in METHODS.items():
        assert method.__doc__ and method.Params.model_config.get("extra") == "forbid", name
        for field in method.Params.model_fields.values():
            assert field.description, name


def test_methods_act_in_config_order(plugin, fast_overrides):
    cfg = load_config(None, fast_overrides, base={"methods": {plugin: {}, "repexp": {}}})
    assert list(build_components(cfg).methods.chosen) == [plugin, "repexp"]
