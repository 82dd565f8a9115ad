"""RFPO: its calibration and verdicts on hand-computed cases, and through the trainer: after the
label steps the critic is calibrated, frozen, and its verdicts are the rewards the advantages
read; a resumed run keeps the calibration."""

import json

import pytest
import torch

from rlvr.algos.advantages import at_last_policy_token
from rlvr.config import ConfigError, load_config
from rlvr.methods.rfpo import (
    Calibration,
    CriticJudge,
    Params,
    length_cells,
    reply_shape,
    separation,
)
from rlvr.rewards import REWARDS
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.types import Score


def test_cells_are_length_deciles_split_by_whether_the_reply_was_cut_off():
    edges = torch.tensor([10.0, 20, 30, 40, 50, 60, 70, 80, 90])
    lengths = torch.tensor([5, 10, 45, 95, 95])
    truncated = torch.tensor([False, False, True, False, True])
    # a length equal to a bound belongs to the decile above it
    assert length_cells(lengths, truncated, edges).tolist() == [0, 2, 9, 18, 19]


def test_calibration_centres_each_cell_and_finds_the_threshold_that_agrees_best():
    values = torch.tensor([0.9, 0.8, 0.2, 0.6, 0.1, 0.7])
    lengths = torch.full((6,), 12)  # every decile bound is 12: all replies in the top decile
    truncated = torch.tensor([False, False, False, True, True, True])
    labels = torch.tensor([True, True, False, False, False, True])
    fit = Calibration.fit(values, lengths, truncated, labels)
    finished, cut = (0.9 + 0.8 + 0.2) / 3, (0.6 + 0.1 + 0.7) / 3
    assert fit.baselines[18] == pytest.approx(finished) and fit.baselines[19] == pytest.approx(cut)
    # empty cells take the overall mean
    assert fit.baselines[0] == pytest.approx(values.double().mean().item())
    # margins: 0.267 0.167 -0.433 | 0.133 -0.367 0.233; labels split them between 0.133 and 0.167
    assert fit.tau == pytest.approx((0.6 - cut + 0.8 - finished) / 2)
    assert fit.agreement == 1.0 and fit.auc == 1.0  # every right reply's margin is higher
    verdicts = fit.verdicts(torch.tensor([0.8, 0.7, 0.5]), torch.tensor([12, 12, 12]),
                            torch.tensor([False, False, True]))  # fmt: skip
    # margins 0.167, 0.067 (finished) and 0.033 (cut off) against tau 0.15
    assert verdicts.tolist() == [1.0, 0.0, 0.0]


def test_calibration_reports_the_agreement_a_threshold_cannot_improve():
    values = torch.tensor([0.1, 0.2, 0.3, 0.4])
    lengths, truncated = torch.full((4,), 5), torch.zeros(4, dtype=torch.bool)
    labels = torch.tensor([False, True, False, True])  # no single threshold separates them
    fit = Calibration.fit(values, lengths, truncated, labels)
    # margins -0.15 -0.05 0.05 0.15: thresholds between the first two or the last two agree on 3
    # of 4; the lowest such is taken
    assert fit.agreement == 0.75 and fit.tau == pytest.approx(-0.1)
    assert fit.auc == 0.75  # of the 4 (right, wrong) pairs, the right one is higher in 3


def test_when_every_reply_failed_the_threshold_passes_none():
    values = torch.tensor([0.0, 0.0, 0.0])
    lengths, truncated = torch.full((3,), 5), torch.zeros(3, dtype=torch.bool)
    fit = Calibration.fit(values, lengths, truncated, torch.zeros(3, dtype=torch.bool))
    assert fit.agreement == 1.0 and fit.tau == 1.0 and fit.auc == 0.5  # one class: no ranking
    assert fit.verdicts(values, lengths, truncated).tolist() == [0.0, 0.0, 0.0]


def test_separation_counts_ties_as_half():
    scores = torch.tensor([0.3, 0.3, 0.1, 0.5])
    labels = torch.tensor([True, False, False, True])
    # pairs (right, wrong): (0.3, 0.3) tie, (0.3, 0.1) win, (0.5, 0.3) win, (0.5, 0.1) win
    assert separation(scores, labels) == pytest.approx(3.5 / 4)


RFPO = ["algo.advantage=gae", "algo.lam=1", "methods.rfpo.label_steps=1",
        "methods.rfpo.calibration_rollouts=16", "train.steps=2"]  # fmt: skip


@pytest.fixture(autouse=True)
def parity_verifier(monkeypatch):
    """A verifier whose verdicts vary within every group, so the critic has success to learn."""
    monkeypatch.setitem(
        REWARDS, "numeric", lambda problem, response: Score(float(len(response) % 2), "ok")
    )


def spy_on(trainer):
    """Each step's trajectories and the rewards and values its advantages were built from."""
    seen = {"trajectories": [], "inputs": []}
    collect, estimator = trainer.rollout, trainer.components.advantage

    def rollout(timings):
        trajectories, baselines, sampling = collect(timings)
        seen["trajectories"].append(trajectories)
        return trajectories, baselines, sampling

    def advantage(inputs, algo):
        seen["inputs"].append((inputs.rewards.clone(), inputs.values.clone(), inputs.loss_mask))
        return estimator(inputs, algo)

    trainer.rollout, trainer.components.advantage = rollout, advantage
    return seen


def critic_weights(trainer):
    return [p.detach().clone() for p in trainer.critic.model.parameters()]


@pytest.mark.parametrize("label_share", [0.0, 1.0])
def test_after_the_label_steps_the_frozen_critic_judges_every_reply(fast_overrides, label_share):
    overrides = [*fast_overrides, *RFPO, f"methods.rfpo.label_share={label_share}"]
    trainer = Trainer(load_config(None, overrides))
    seen = spy_on(trainer)
    before = critic_weights(trainer)
    first = trainer.step()
    trainer.state["step"] = 1
    after_labels = critic_weights(trainer)
    assert "rfpo/agreement" not in first  # a label step: verifier rewards, critic trained
    assert any(not torch.equal(a, b) for a, b in zip(before, after_labels))
    judged = trainer.step()
    assert all(torch.equal(a, b) for a, b in zip(after_labels, critic_weights(trainer)))
    calibration = trainer.methods.chosen["rfpo"].judge.calibration
    assert judged["rfpo/tau"] == calibration.tau
    assert 0.5 <= judged["rfpo/calibration_agreement"] == calibration.agreement <= 1.0
    trajectories = seen["trajectories"][1]
    rewards, values, mask = seen["inputs"][1]
    correct = torch.tensor([float(t.correct) for t in trajectories])
    if label_share:  # every reply keeps the verifier's reward
        assert torch.equal(rewards, correct) and judged["rfpo/labelled_share"] == 1.0
    else:  # the verdict on each reply's final value, recomputed here by hand
        verdicts = calibration.verdicts(
            at_last_policy_token(values, mask), *reply_shape(trajectories)
        )
        assert torch.equal(rewards, verdicts) and judged["rfpo/labelled_share"] == 0.0
        agreement = float((verdicts == correct).float().mean())
        assert judged["rfpo/agreement"] == pytest.approx(agreement)


def test_a_resumed_run_judges_with_the_calibration_it_saved(fast_overrides, tmp_path):
    overrides = [*fast_overrides, *RFPO, "train.steps=3", "train.save_every=1"]
    straight = Trainer(load_config(None, overrides + ["log.name=straight"]))
    straight.run()
    interrupted = Trainer(load_config(None, overrides + ["log.name=cut", "train.steps=2"]))
    interrupted.run()
    resumed = Trainer(
        load_config(None, overrides + ["log.name=cut"]), resume=tmp_path / "runs" / "cut"
    )
    assert (
        resumed.methods.chosen["rfpo"].judge.calibration
        == straight.methods.chosen["rfpo"].judge.calibration
    )
    resumed.run()

    def step_3(name):
        lines = (tmp_path / "runs" / name / "metrics.jsonl").read_text().splitlines()
        return next(r for r in map(json.loads, lines) if r.get("step") == 3 and "loss" in r)

    a, b = step_3("straight"), step_3("cut")
    assert "rfpo/calibration_agreement" not in b  # calibrated once, at step 2
    for key in ("reward", "rfpo/agreement", "rfpo/pass_rate", "loss"):
        assert a[key] == pytest.approx(b[key], abs=1e-6), key


@pytest.mark.parametrize(
    "override", ["algo.lam=0.95", "algo.advantage_params.lam_mode=length_adaptive"]
)
def test_rfpo_needs_an_undiscounted_unbootstrapped_critic(fast_overrides, override):
    with pytest.raises(ConfigError, match="algo.advantage=gae, algo.gamma=1, algo.lam=1 and "
                       "algo.advantage_params.lam_mode=fixed"):  # fmt: skip
        build_components(load_config(None, [*fast_overrides, *RFPO, override]))


def test_a_critic_that_barely_separates_right_from_wrong_is_reported():
    judge = CriticJudge(Params(), seed=0)
    judge.calibration = Calibration([0.0] * 9, [0.0] * 20, tau=-0.01, agreement=0.71, auc=0.52)
    assert "AUC 0.52" in judge.weak_judge() and "71%" in judge.weak_judge()
    judge.calibration = Calibration([0.0] * 9, [0.0] * 20, tau=0.1, agreement=0.93, auc=0.9)
    assert judge.weak_judge() is None
