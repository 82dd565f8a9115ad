"""Every registered estimator, loss, aggregation and KL form runs through the same trainer."""

import math

import pytest

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.kl import KL_ESTIMATORS
from rlvr.algos.losses import AGGREGATIONS, LOSSES
from rlvr.config import ConfigError, load_config
from rlvr.methods import METHODS
from rlvr.rewards import REWARDS
from rlvr.train.trainer import Trainer
from rlvr.types import Score


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")


def two_steps(fast_overrides, monkeypatch, *overrides):
    monkeypatch.setitem(REWARDS, "parity", parity)  # binary and varied within groups
    cfg = load_config(
        None,
        fast_overrides
        + ["train.steps=2", "task.rewards={parity: 1.0}"]
        + ["task.eval_size=2", "train.eval_k=1", *overrides],  # nothing here reads the evals
    )
    trainer = Trainer(cfg)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.run()
    moved = any((p - q).abs().max() > 0 for p, q in zip(before, trainer.model.parameters()))
    return trainer, moved


# counterfactual is a debate critic's baseline: tests/methods/test_debate.py trains with it
@pytest.mark.parametrize("name", sorted(set(ADVANTAGES) - {"counterfactual"}))
def test_every_estimator_trains(name, fast_overrides, monkeypatch):
    # an estimator of tree segments trains on tree rollouts
    trees = "segment_advantages" in getattr(ADVANTAGES[name], "requires", ())
    extra = ["rollout.tree_width=2"] if trees else []
    if getattr(ADVANTAGES[name], "q_targets", False):  # Bellman targets go with their loss
        extra.append("algo.loss=soft_q")
    requires = set(getattr(ADVANTAGES[name], "requires", ()))  # a method fills what it needs
    extra += [f"methods.{m}={{}}" for m, cls in METHODS.items() if requires & cls.provides]
    if name == "passk":  # its default k = 4 needs groups of 5; these have 4
        extra.append("algo.advantage_params.k=2")
    _, moved = two_steps(fast_overrides, monkeypatch, f"algo.advantage={name}", *extra)
    assert moved


def test_estimators_needing_inputs_nobody_produces_are_refused_up_front(
    fast_overrides, monkeypatch
):
    def oracle(inputs, algo):
        """Needs a field the trainer never fills."""

    oracle.requires = ("oracle_values",)
    monkeypatch.setitem(ADVANTAGES, "oracle", oracle)
    with pytest.raises(ConfigError, match="oracle_values"):
        Trainer(load_config(None, fast_overrides + ["algo.advantage=oracle"]))


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("agg", sorted(AGGREGATIONS))
def test_every_loss_and_aggregation_trains(loss, agg, fast_overrides, monkeypatch):
    extra = ["algo.clip_low=0.0003", "algo.clip_high=0.0004"] if loss == "gspo" else []
    if getattr(LOSSES[loss], "q_targets", False):
        extra.append("algo.advantage=soft_bellman")
    _, moved = two_steps(
        fast_overrides, monkeypatch, f"algo.loss={loss}", f"algo.loss_agg={agg}", *extra
    )
    assert moved


@pytest.mark.parametrize("estimator", sorted(KL_ESTIMATORS))
@pytest.mark.parametrize("in_reward", [False, True])
def test_every_kl_form_trains_and_is_logged(estimator, in_reward, fast_overrides, monkeypatch):
    trainer, moved = two_steps(
        fast_overrides, monkeypatch, "algo.kl_coef=0.1", f"algo.kl_estimator={estimator}",
        f"algo.kl_in_reward={in_reward}", "algo.ppo_epochs=2",
    )  # fmt: skip
    records = trainer.run_dir.read_metrics()
    kls = [r["kl"] for r in records if "kl" in r]
    assert moved and len(kls) == 2 and all(math.isfinite(k) for k in kls)


def test_adaptive_kl_coefficient_moves_toward_its_target(fast_overrides, monkeypatch):
    trainer, _ = two_steps(
        fast_overrides, monkeypatch, "algo.kl_coef=0.1", "algo.kl_target=1000", "algo.kl_horizon=16"
    )
    coefs = [r["kl_coef"] for r in trainer.run_dir.read_metrics() if "kl_coef" in r]
    assert coefs[0] == 0.1 and coefs[1] < 0.1  # measured KL far below target: the coefficient drops


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_truncated_importance_sampling_and_the_measured_mismatch(
    level, fast_overrides, monkeypatch
):
    trainer, moved = two_steps(fast_overrides, monkeypatch, f"algo.tis={level}", "algo.tis_cap=2.0")
    records = [r for r in trainer.run_dir.read_metrics() if "mismatch/abs_diff_max" in r]
    assert moved and len(records) == 2
    # the embedded engine samples with the training model itself: the mismatch is float noise
    assert all(r["mismatch/abs_diff_max"] < 1e-4 for r in records)
    assert all(r["mismatch/truncated_share"] == 0 for r in records)


def test_dapo_pieces_train_and_report(fast_overrides, monkeypatch):
    trainer, moved = two_steps(
        fast_overrides, monkeypatch, "algo.dynamic_sampling=true", "algo.max_sampling_rounds=2",
        "algo.overlong_window=8", "algo.mask_truncated=true", "algo.clip_high=0.28",
    )  # fmt: skip
    records = [r for r in trainer.run_dir.read_metrics() if "sampling/prompts" in r]
    assert len(records) == 2
    for r in records:
        assert r["sampling/kept_groups"] <= 4 and r["sampling/prompts"] >= 4
        assert -1.0 <= r["reward/overlong"] <= 0.0


def test_dynamic_sampling_drops_groups_with_equal_rewards(fast_overrides, monkeypatch):
    from rlvr.train.trainer import Trainer as T

    def first_problem_only(problem, response):  # only problems whose id sorts low can vary
        return Score(float(len(response) % 2) if problem.id < "arith-5" else 1.0, "ok")

    monkeypatch.setitem(REWARDS, "mixed", first_problem_only)
    cfg = load_config(None, fast_overrides + [
        "task.rewards={mixed: 1.0}", "algo.dynamic_sampling=true", "algo.max_sampling_rounds=3",
    ])  # fmt: skip
    trainer = T(cfg)
    trajectories, _, sampling = trainer.rollout({})
    rewards: dict[int, set] = {}
    for t in trajectories:
        rewards.setdefault(t.group_id, set()).add(t.reward)
    assert all(len(r) > 1 for r in rewards.values())
    assert sorted(rewards) == list(range(len(rewards)))
    assert sampling["sampling/kept_groups"] == len(rewards)
    assert sampling["sampling/dropped_groups"] > 0  # the rewards make most groups all-equal
