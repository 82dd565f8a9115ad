"""POISE: the probe's features, fit, predictions and state by hand; through the trainer, a probe
fitted before its batch, resumed exactly."""

import numpy as np
import pytest
import torch

from rlvr.algos.advantages import ADVANTAGES
from rlvr.analysis.probes import last_mean
from rlvr.config import ConfigError, load_config
from rlvr.methods.poise import (
    LayerFeatures,
    Params,
    Probe,
    decoder_layers,
    probe_metrics,
    rollout_features,
)
from rlvr.rewards import REWARDS
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.train.update import batch_logprobs
from rlvr.types import Batch, Problem, Score, Trajectory


def test_last_mean_averages_the_last_k_masked_positions():
    hidden = torch.arange(6.0).reshape(1, 6, 1)
    mask = torch.tensor([[True, False, True, True, True, False]])
    # masked positions 0, 2, 3, 4: the last two are 3 and 4
    assert last_mean(hidden, mask, k=2).item() == 3.5
    assert last_mean(hidden, mask, k=10).item() == (0 + 2 + 3 + 4) / 4
    assert last_mean(hidden, torch.zeros_like(mask), k=2).item() == 0.0  # nothing masked


def test_rollout_features_split_prompt_response_and_entropy():
    # 7 positions, hidden = position; targets 2, 3 and 4 are policy tokens (tokens 3, 4, 5), and
    # position 6 is padding
    hidden = torch.arange(7.0).reshape(1, 7, 1)
    attention = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    loss_mask = torch.tensor([[0.0, 0, 1, 1, 1, 0]])
    entropy = torch.tensor([[9.0, 9, 1, 2, 3, 9]])
    features = rollout_features(hidden, attention, loss_mask, entropy)
    # prompt: tokens 0..2 (2 is the input of the first policy target); response: tokens 3, 4, 5
    assert features.tolist() == [[1.0, 4.0, 2.0]]


def test_layer_features_hook_the_layer_that_output_hidden_states_names(tiny_model, tokenizer):
    trajectories = []
    for i, (prompt_len, reply_len) in enumerate([(5, 3), (4, 6), (6, 2)]):
        ids = torch.randint(7, len(tokenizer), (prompt_len + reply_len,)).tolist()
        trajectories.append(
            Trajectory(
                Problem(str(i), "x"),
                group_id=0,
                sample_index=i,
                token_ids=ids,
                loss_mask=[0] * prompt_len + [1] * reply_len,
                behaviour_logprobs=[0.0] * len(ids),
                turn_rewards=[1.0],
                turn_ends=[len(ids)],
            )  # fmt: skip
        )
    batch = Batch.from_trajectories(trajectories, tokenizer.pad_token_id)
    layers = len(decoder_layers(tiny_model))
    features = LayerFeatures(tiny_model, -1, len(batch))
    assert features.index == layers // 2  # the default is the middle layer
    logprobs = batch_logprobs(tiny_model, batch, 2, 1.0, observers=[features])
    assert torch.equal(logprobs, batch_logprobs(tiny_model, batch, 2, 1.0, share_prompt=False))
    with torch.no_grad():
        out = tiny_model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            output_hidden_states=True,
        )
    logp = out.logits[:, :-1].float().log_softmax(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    # hidden_states[0] is the embeddings, so layer k's output is hidden_states[k + 1]
    want = rollout_features(
        out.hidden_states[layers // 2 + 1], batch.attention_mask, batch.loss_mask, entropy
    )
    torch.testing.assert_close(features.values, want, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="methods.poise.layer"):
        LayerFeatures(tiny_model, layers, 3)


def synthetic(n, hidden=24, seed=0):
    """Features whose target is a linear function of a few directions, plus noise."""
    g = np.random.default_rng(seed)
    x = g.normal(size=(n, 2 * hidden + 1))
    signal = x[:, 0] - 0.8 * x[:, 3] + 0.6 * x[:, hidden + 1] + 0.5 * x[:, -1]
    y = 0.5 + 0.12 * signal + 0.03 * g.normal(size=n)
    return torch.from_numpy(x).float(), torch.from_numpy(y)


def test_the_probe_learns_a_linear_target():
    probe = Probe(Params(prompt_dims=24, response_dims=24, ridge_alpha=1.0))
    x, y = synthetic(600)
    probe.observe(x, ["math"] * len(x), y)
    test_x, test_y = synthetic(300, seed=1)
    predictions = probe.predict(test_x, ["math"] * len(test_x))
    metrics = probe_metrics(predictions, test_y)
    assert metrics["poise/skill"] > 0.5 and metrics["poise/pearson"] > 0.8
    assert ((predictions >= 0) & (predictions <= 1)).all()  # clipped to a success rate


def two_kinds(prompts, seed, hidden=6, signal=0.05):
    """Two rollouts per prompt; a prompt is easy (success rate 0.9) or hard (0.1), as its
    prompt feature says along one direction of small scale (std `signal` against 1 for the
    noise), as one direction among many is in a real hidden state."""
    g = np.random.default_rng(seed)
    easy = np.repeat(g.random(prompts) < 0.5, 2)
    x = g.normal(size=(2 * prompts, 2 * hidden + 1))
    x[:, 0] = signal * np.where(easy, 1.0, -1.0)
    rewards = (g.random(2 * prompts) < np.where(easy, 0.9, 0.1)).astype(float)
    groups = torch.arange(prompts).repeat_interleave(2)
    return torch.from_numpy(x).float(), torch.from_numpy(rewards), groups, torch.from_numpy(easy)


def test_a_probe_that_reads_difficulty_has_held_out_skill_and_its_baseline_follows_it():
    # the paper's ridge_alpha = 100 on the paper's standardised features; PCA keeps every
    # direction (dims = hidden), so only the ridge could lose the small-scale signal
    probe = Probe(Params(prompt_dims=6, response_dims=6, bootstrap_steps=0))
    x, rewards, groups, _ = two_kinds(1000, seed=0)
    probe.update(
        x, ["math"] * len(x), rewards, groups, probe.baselines(x, ["math"] * len(x), rewards, 0)
    )
    # held-out prompts: the probe has never seen them
    x, rewards, groups, easy = two_kinds(2000, seed=1)
    guess = probe.baselines(x, ["math"] * len(x), rewards, step=1)
    assert guess.used.all()
    # the baseline follows the success rate, 0.9 for an easy prompt's sibling and 0.1 for a
    # hard one, shrunk toward 0.5 by the ridge: the standardised feature is +-1, so its
    # coefficient is 0.4 n / (n + alpha) = 0.4 * 2000 / 2100 and the predictions 0.5 +- 0.381
    assert abs(guess.predictions[easy].mean() - 0.881) < 0.02
    assert abs(guess.predictions[~easy].mean() - 0.119) < 0.02
    metrics = probe.update(x, ["math"] * len(x), rewards, groups, guess)
    # against the sibling's 0/1 reward even the true rate scores only Var(p) / Var(target) =
    # 0.16 / (0.16 + 0.9 * 0.1) = 0.64: a near-constant probe scores about 0
    assert 0.55 < metrics["poise/skill"] < 0.7
    # r - p has variance p(1 - p) = 0.09; rloo's r_i - r_j twice that, 0.18; a constant 0.5
    # baseline would give 0.25
    assert abs(metrics["poise/adv_var"] - 0.09) < 0.015
    assert abs(metrics["poise/rloo_adv_var"] - 0.18) < 0.02


def test_buffers_are_per_domain_bounded_and_recent():
    probe = Probe(Params(buffer=50))
    x, y = synthetic(80)
    probe.observe(x[:40], ["math"] * 20 + ["code"] * 20, y[:40])
    probe.observe(x[40:], ["math"] * 40, y[40:])
    assert len(probe.buffers["code"]) == 20 and len(probe.buffers["math"]) == 50
    # the oldest math rows went first: what is kept is the last 10 of the first call, then all
    kept = np.concatenate([x[10:20].numpy(), x[40:].numpy()])
    assert np.array_equal(probe.buffers["math"][:, :-1], kept)
    assert probe.predict(x[:2], ["other", "code"])[0].isnan()  # no probe for an unseen domain


def test_state_dict_round_trip_gives_identical_predictions(tmp_path):
    probe = Probe(Params(prompt_dims=8, response_dims=8))
    x, y = synthetic(100)
    probe.observe(x, ["math"] * 50 + ["code"] * 50, y)
    torch.save(probe.state_dict(), tmp_path / "probe.pt")  # as inside the trainer checkpoint
    restored = Probe(Params(prompt_dims=8, response_dims=8))
    restored.load_state_dict(torch.load(tmp_path / "probe.pt", weights_only=False))
    test_x, _ = synthetic(20, seed=3)
    domains = ["math", "code"] * 10
    assert torch.equal(probe.predict(test_x, domains), restored.predict(test_x, domains))
    # and both keep learning alike
    more_x, more_y = synthetic(10, seed=4)
    probe.observe(more_x, ["math"] * 10, more_y)
    restored.observe(more_x, ["math"] * 10, more_y)
    assert torch.equal(probe.predict(test_x, domains), restored.predict(test_x, domains))


def test_baselines_fall_back_to_rewards_during_bootstrap_and_before_a_fit():
    probe = Probe(Params(bootstrap_steps=2))
    x, y = synthetic(40)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    unfitted = probe.baselines(x[:4], ["math"] * 4, rewards, step=5)
    assert torch.equal(unfitted.predictions, rewards.double()) and not unfitted.used.any()
    probe.observe(x, ["math"] * 40, y)
    early = probe.baselines(x[:4], ["math"] * 4, rewards, step=1)
    assert torch.equal(early.predictions, rewards.double()) and not early.probe.isnan().any()
    late = probe.baselines(x[:4], ["math", "math", "new", "new"], rewards, step=2)
    assert late.used.tolist() == [True, True, False, False]
    assert torch.equal(late.predictions[2:], rewards[2:].double())
    assert torch.equal(late.predictions[:2], late.probe[:2])


def test_update_logs_then_refits_on_sibling_mean_targets():
    probe = Probe(Params())
    x, _ = synthetic(6)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1, 1, 2])  # group 2 has no sibling: left out
    guess = probe.baselines(x, ["math"] * 6, rewards, step=0)
    metrics = probe.update(x, ["math"] * 6, rewards, groups, guess)
    assert metrics["poise/fitted"] == 0.0 and "poise/skill" not in metrics
    # unfitted: the baseline is rloo's, so both variances are of the same advantages
    assert metrics["poise/adv_var"] == metrics["poise/rloo_adv_var"]
    targets = probe.buffers["math"][:, -1].tolist()
    assert targets == [0.0, 1.0, 0.5, 0.5, 1.0]  # each row's siblings' mean reward
    assert "math" in probe.fits  # five rows: fitted for the next step


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")  # varied within groups


def poise_config(fast_overrides, *extra):
    return load_config(
        None,
        fast_overrides
        + [
            "rollout.group_size=2", "algo.advantage=poise", "methods.poise={}", "methods.poise.bootstrap_steps=1",
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
        rows = sum(len(buffer) for buffer in first.methods.chosen["poise"].probe.buffers.values())
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
    saved = first.methods.chosen["poise"].probe.state_dict()
    (domain,) = saved["fits"]  # the task's one domain
    resumed = Trainer(
        poise_config(fast_overrides, "train.steps=3", "log.name=poise"),
        resume=tmp_path / "runs" / "poise",
    )
    restored = resumed.methods.chosen["poise"].probe.state_dict()
    assert restored["buffers"].keys() == saved["buffers"].keys()
    assert np.array_equal(restored["buffers"][domain], saved["buffers"][domain])
    for name, array in saved["fits"][domain].items():
        assert np.array_equal(restored["fits"][domain][name], array), name
    features = torch.from_numpy(saved["buffers"][domain][:8, :-1])
    assert torch.equal(
        first.methods.chosen["poise"].probe.predict(features, [domain] * 8),
        resumed.methods.chosen["poise"].probe.predict(features, [domain] * 8),
    )
    resumed.run()  # and the resumed run trains on with it
    assert records(resumed)[3]["poise/fitted"] == 1.0


def test_the_poise_estimator_names_the_method_that_feeds_it(fast_overrides):
    with pytest.raises(ConfigError, match=r"Fix: add methods.poise=\{\}"):
        build_components(load_config(None, [*fast_overrides, "algo.advantage=poise"]))
    with pytest.raises(ConfigError, match="fix: algo.advantage=poise"):
        build_components(load_config(None, [*fast_overrides, "methods.poise={}"]))
