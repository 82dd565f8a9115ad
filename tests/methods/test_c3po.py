"""3PO / C3PO as a method: its settings' clashes fail before any work, naming the fix, and the
recipe runs each group's replies over weight draws of the optimizer's posterior."""

from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.rollout.weight_noise import WeightNoise
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["methods.c3po.weight_samples=3"], ["rollout.group_size = 4", "divisor"]),
        (["methods.c3po.weight_samples=2"], ["algo.tis=sequence_mask"]),
        (
            ["algo.tis=sequence_mask", "rollout.tree_width=2", "algo.advantage=tree"],
            ["rollout.tree_width", "methods.c3po=null"],
        ),
        (
            ["algo.tis=sequence_mask", "distributed.backend=ray"],
            ["distributed.backend=ray samples otherwise"],
        ),
    ],
)
def test_weight_samples_that_cannot_work_name_the_fix(overrides, names, fast_overrides):
    cfg = load_config(None, [*fast_overrides, "methods.c3po={}", *overrides])
    with pytest.raises(ConfigError) as e:
        build_components(cfg)
    assert all(name in str(e.value) for name in names), str(e.value)


def test_the_recipe_samples_each_group_over_its_weight_draws(fast_overrides):
    cfg = load_config(Path("examples/recipes/c3po.toml"), [*fast_overrides, "train.steps=1"])
    assert cfg.methods["c3po"]["weight_samples"] == 2 and cfg.model.lora.r > 0
    trainer = Trainer(cfg)
    try:
        noise = trainer.source.noise
        assert isinstance(noise, WeightNoise) and noise.samples == 2
        assert noise.optimizer is trainer.updater.optimizer  # its second moments shape sigma
        metrics = trainer.step()  # the posterior's scale is logged with the rollout's stats
        assert metrics["rollout/weight_sigma_mean"] == pytest.approx(10**-2, rel=1e-3)
    finally:
        trainer.close()
