"""POISE through the trainer: probe features from the old-logprob pass, advantages before the
probe's refit, its metrics, and its state across a checkpoint."""

import numpy as np
import torch

from rlvr.algos.advantages import ADVANTAGES
from rlvr.config import load_config
from rlvr.rewards import REWARDS
from rlvr.train.trainer import Trainer
from rlvr.types import Score


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")  # varied within groups


def poise_config(fast_overrides, *extra):
    return load_config(
        None,
        fast_overrides
        + [
            "rollout.group_size=2", "algo.advantage=poise", "algo.poise_bootstrap_steps=1",
            "task.rewards={parity: 1.0}", *extra,
        ],
    )  # fmt: skip


def records(trainer):
    return {r["step"]: r for r in trainer.run_dir.read_metrics() if "loss" in r}


def test_poise_uses_a_probe_fitted_before_its_batch_and_resumes_it_exactly(
    fast_overrides, monkeypatch, tmp_path
):
    monkeypatch.setitem(REWARDS, "parity", parity)
    first = Trainer(poise_config(fast_overrides, "train.steps=2", "log.name=poise"))
    original, seen = ADVANTAGES["poise"], []

    def spy(inputs, algo):
        # the probe has seen only earlier steps' rollouts when this step's advantages are made
        rows = sum(len(buffer) for buffer in first.probe.buffers.values())
        seen.append((rows, inputs.probe_predictions.clone()))
        assert inputs.old_logprobs is not None  # the forced old-logprob pass ran
        return original(inputs, algo)

    first.components.advantage = spy
    first.run()
    assert [n for n, _ in seen] == [0, 16]  # rollout.batch_size=16 per step
    by_step = records(first)
    assert by_step[1]["poise/fitted"] == 0.0  # the bootstrap step: rloo
    assert by_step[1]["poise/adv_var"] == by_step[1]["poise/rloo_adv_var"]
    assert by_step[2]["poise/fitted"] == 1.0 and "poise/skill" in by_step[2]
    assert 0.0 <= seen[1][1].min() and seen[1][1].max() <= 1.0  # clipped probe predictions

    # the checkpoint of the finished run holds the probe; a resumed run gets it back exactly
    saved = first.probe.state_dict()
    (domain,) = saved["fits"]  # the task's one domain
    resumed = Trainer(
        poise_config(fast_overrides, "train.steps=3", "log.name=poise"),
        resume=tmp_path / "runs" / "poise",
    )
    restored = resumed.probe.state_dict()
    assert restored["buffers"].keys() == saved["buffers"].keys()
    assert np.array_equal(restored["buffers"][domain], saved["buffers"][domain])
    for name, array in saved["fits"][domain].items():
        assert np.array_equal(restored["fits"][domain][name], array), name
    features = torch.from_numpy(saved["buffers"][domain][:8, :-1])
    assert torch.equal(
        first.probe.predict(features, [domain] * 8), resumed.probe.predict(features, [domain] * 8)
    )
    resumed.run()  # and the resumed run trains on with it
    assert records(resumed)[3]["poise/fitted"] == 1.0
