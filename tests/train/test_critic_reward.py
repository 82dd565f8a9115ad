"""RFPO through the trainer: after the label steps the critic is calibrated, frozen, and its
verdicts are the rewards the advantages read; a resumed run keeps the calibration."""

import json

import pytest
import torch

from rlvr.algos.advantages import at_last_policy_token
from rlvr.algos.critic_reward import Calibration
from rlvr.config import ConfigError, load_config
from rlvr.rewards import REWARDS
from rlvr.train.critic_reward import CriticJudge, reply_shape
from rlvr.train.trainer import Trainer
from rlvr.types import Score

RFPO = ["algo.advantage=gae", "algo.lam=1", "algo.rfpo_label_steps=1",
        "algo.rfpo_calibration_rollouts=16", "train.steps=2"]  # fmt: skip


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
    overrides = [*fast_overrides, *RFPO, f"algo.rfpo_label_share={label_share}"]
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
    calibration = trainer.judge.calibration
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
    assert resumed.judge.calibration == straight.judge.calibration
    resumed.run()

    def step_3(name):
        lines = (tmp_path / "runs" / name / "metrics.jsonl").read_text().splitlines()
        return next(r for r in map(json.loads, lines) if r.get("step") == 3 and "loss" in r)

    a, b = step_3("straight"), step_3("cut")
    assert "rfpo/calibration_agreement" not in b  # calibrated once, at step 2
    for key in ("reward", "rfpo/agreement", "rfpo/pass_rate", "loss"):
        assert a[key] == pytest.approx(b[key], abs=1e-6), key


def test_rfpo_needs_an_undiscounted_unbootstrapped_critic(fast_overrides):
    with pytest.raises(ConfigError, match="algo.advantage=gae, algo.gamma=1, algo.lam=1"):
        load_config(None, [*fast_overrides, *RFPO, "algo.lam=0.95"])


def test_a_critic_that_barely_separates_right_from_wrong_is_reported():
    judge = CriticJudge(load_config(None, RFPO).algo, seed=0)
    judge.calibration = Calibration([0.0] * 9, [0.0] * 20, tau=-0.01, agreement=0.71, auc=0.52)
    assert "AUC 0.52" in judge.weak_judge() and "71%" in judge.weak_judge()
    judge.calibration = Calibration([0.0] * 9, [0.0] * 20, tau=0.1, agreement=0.93, auc=0.9)
    assert judge.weak_judge() is None
