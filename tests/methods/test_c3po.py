"""3PO / C3PO as a method: IVON's posterior scale and draws against hand numbers, a step's
gradient taken at a posterior sample as IVON's own loop takes it, the pooled advantage and the
sequence-level mask by hand, sigma spreading over the weights in a run, and its clashes."""

import math
import sys
from pathlib import Path

import pytest
import torch

from rlvr.algos.advantages import AdvInputs, grpo
from rlvr.algos.correction import truncated_is_weights
from rlvr.config import AlgoConfig, ConfigError, load_config
from rlvr.methods.c3po import (
    INSTALL,
    TRAINING_DRAW_STREAM,
    Posterior,
    SampledSteps,
    posterior_std,
    seeded,
)
from rlvr.rewards import REWARDS
from rlvr.rollout.engine import sample_seed
from rlvr.rollout.weight_noise import weight_sample_of
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.types import Score


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


def test_without_ivon_installed_the_run_names_the_install_line(fast_overrides, monkeypatch):
    monkeypatch.setitem(sys.modules, "ivon", None)  # what `import ivon` meets when it is absent
    cfg = load_config(Path("examples/recipes/c3po.toml"), fast_overrides)
    with pytest.raises(ConfigError) as e:
        build_components(cfg)
    assert "ivon-opt" in str(e.value) and INSTALL in str(e.value)


def ivon_over(values: list[float], hess: list[float]):
    IVON = pytest.importorskip("ivon").IVON
    param = torch.nn.Parameter(torch.tensor(values))
    optimizer = IVON([param], lr=0.1, ess=100.0, hess_init=1.0, weight_decay=0.1, beta2=0.9)
    optimizer.param_groups[0]["hess"] = torch.tensor(hess)
    return param, optimizer


def test_sigma_and_a_draw_follow_ivons_hess_state():
    param, optimizer = ivon_over([0.5, -1.0, 2.0], hess=[0.0, 0.3, 0.9])
    posterior = Posterior(optimizer, samples=2)
    # 1 / sqrt(lambda (h + delta)) = 1 / sqrt(100 * 0.1), 1 / sqrt(100 * 0.4), 1 / sqrt(100 * 1.0)
    sigma = torch.tensor([10**-0.5, 40**-0.5, 0.1])
    assert torch.allclose(posterior.stds(), sigma)
    assert torch.allclose(posterior_std(torch.tensor([0.3]), 100.0, 0.1), sigma[1:2])
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    z = torch.randn(3, generator=torch.Generator().manual_seed(11))  # the seed's noise
    with posterior.sampled(11):
        drawn = param.detach().clone()
        assert torch.allclose(drawn, torch.tensor([0.5, -1.0, 2.0]) + sigma * z)
    with posterior.sampled(11):
        assert torch.equal(param, drawn)  # the same seed, the same draw
    with posterior.sampled(12):
        assert not torch.equal(param, drawn)
    assert torch.equal(param.detach(), torch.tensor([0.5, -1.0, 2.0]))  # the mean, bit for bit
    assert torch.equal(torch.random.get_rng_state(), before)  # the run's own stream untouched
    assert posterior.metrics() == pytest.approx(
        {"weight_sigma_min": 0.1, "weight_sigma_median": 40**-0.5, "weight_sigma_max": 10**-0.5}
    )


def quadratic(param: torch.Tensor) -> torch.Tensor:
    return (torch.tensor([1.0, 4.0, 0.5]) * param**2).sum()


def test_a_step_takes_its_gradient_at_a_posterior_sample_as_ivons_own_loop_does():
    """rlvr's update calls zero_grad, backward, step; IVON's own loop is sampled_params(train=
    True) around the backward, then step: from the same draw, the same weights and h."""
    param, optimizer = ivon_over([0.5, -1.0, 2.0], hess=[0.0, 0.3, 0.9])
    ours, steps = ivon_over([0.5, -1.0, 2.0], hess=[0.0, 0.3, 0.9])
    sampled = SampledSteps(steps, seed=3)
    for step in range(3):
        sampled.zero_grad()
        at = ours.detach().clone()
        assert not torch.equal(at, param.detach())  # the passes run at a sample, not the mean
        quadratic(ours).backward()
        sampled.step()
        with seeded(sample_seed(3, step, TRAINING_DRAW_STREAM), optimizer._device):
            context = optimizer.sampled_params(train=True)
            context.__enter__()
        assert torch.equal(param.detach(), at)
        optimizer.zero_grad()
        quadratic(param).backward()
        context.__exit__(None, None, None)
        optimizer.step()
        assert torch.equal(ours.detach(), param.detach())
        assert torch.equal(steps.param_groups[0]["hess"], optimizer.param_groups[0]["hess"])
    h = steps.param_groups[0]["hess"]
    assert not torch.allclose(h, torch.tensor([0.0, 0.3, 0.9]))  # the Price estimate moved h


def test_a_skipped_step_drops_its_sample_and_leaves_the_mean():
    param, optimizer = ivon_over([0.5, -1.0, 2.0], hess=[0.0, 0.3, 0.9])
    sampled = SampledSteps(optimizer, seed=0)
    sampled.zero_grad()
    quadratic(param).backward()
    sampled.zero_grad(set_to_none=True)  # a non-finite gradient: the update skips the step
    assert torch.equal(param.detach(), torch.tensor([0.5, -1.0, 2.0]))
    assert optimizer.state["count"] == 0 and optimizer.state["avg_grad"] is None
    sampled.zero_grad()  # the next step's passes run at a fresh sample
    assert not torch.equal(param.detach(), torch.tensor([0.5, -1.0, 2.0]))


def test_a_groups_advantage_pools_its_draws_and_the_mask_keeps_ratios_in_the_band():
    """One group of 4 over 2 draws: replies 0-1 under draw 0, 2-3 under draw 1, one group id."""
    assert [weight_sample_of(i, 4, 2) for i in range(4)] == [0, 0, 1, 1]
    rewards, group_ids, mask = torch.tensor([1.0, 0, 0, 0]), torch.zeros(4), torch.ones(4, 2)
    advantages = grpo(AdvInputs(rewards, group_ids, mask), AlgoConfig())
    # mean 0.25 and unbiased std 0.5 over all four: (1 - 0.25) / 0.5, (0 - 0.25) / 0.5
    assert torch.allclose(
        advantages[:, 0], torch.tensor([1.5, -0.5, -0.5, -0.5], dtype=advantages.dtype), atol=1e-6
    )
    # each reply's two tokens: log pi_trained - log pi_draw sums to log 1.5, 3, 0.4, 0.6
    behaviour = torch.full((4, 2), -1.0)
    trained = behaviour + torch.tensor(
        [[math.log(1.5), 0.0], [math.log(3), 0], [0, math.log(0.4)], [math.log(0.6), 0]]
    )
    weights, metrics = truncated_is_weights(trained, behaviour, mask, "sequence_mask", cap=2.0)
    assert torch.allclose(weights[:, 0], torch.tensor([1.5, 0.0, 0.0, 0.6]))
    assert torch.allclose(
        (advantages * weights)[:, 0].float(), torch.tensor([2.25, 0.0, 0.0, -0.3])
    )
    assert metrics["mismatch/masked_share"] == 0.5


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")


def test_the_recipe_trains_with_ivon_and_sigma_spreads_over_the_weights(
    fast_overrides, monkeypatch
):
    pytest.importorskip("ivon")
    monkeypatch.setitem(REWARDS, "parity", parity)  # varies within groups: every step learns
    overrides = [*fast_overrides, "train.steps=2", "task.rewards={parity: 1.0}"]
    cfg = load_config(Path("examples/recipes/c3po.toml"), overrides)
    assert cfg.methods["c3po"]["weight_samples"] == 2 and cfg.model.lora.r > 0
    trainer = Trainer(cfg)
    try:
        posterior, optimizer = trainer.source.noise, trainer.updater.optimizer
        assert isinstance(posterior, Posterior) and posterior.samples == 2
        assert isinstance(optimizer, SampledSteps) and optimizer.ivon is posterior.ivon
        prior = posterior_std(torch.tensor(1e-5), 1e9, 1e-5)  # the recipe's hess_init, delta
        assert torch.allclose(posterior.stds(), prior)  # before any update: the prior's
        for _ in range(2):
            metrics = trainer.step()
        stds = posterior.stds()
        assert float(((stds / prior - 1).abs() > 0.1).float().mean()) > 0.3
        assert stds.min() < 0.5 * prior and stds.max() > 1.2 * prior
        # the rollout's stats logged the sigma its draws were sampled from (before this update)
        assert metrics["rollout/weight_sigma_min"] < 0.5 * float(prior)
    finally:
        trainer.close()
