"""The RL-vs-SFT comparison: depth slopes by hand, and several models measured on the same
problems from the same seeds (one model under two names gives one result)."""

import pytest

from rlvr.analysis.mechanism import compare, depth_slope, per_layer
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.models.tiny import build_model
from rlvr.rewards.edit_distance import exact_reply
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.runner import EpisodeRunner
from rlvr.types import Problem


def test_depth_slope_by_hand():
    # x = 0, 1/3, 2/3, 1 (mean 1/2), y = 0, 0, 1, 1: cov sum 2/3, var sum 5/9, slope 6/5
    assert depth_slope([0.0, 0.0, 1.0, 1.0]) == pytest.approx(1.2)
    assert depth_slope([0.3, 0.3, 0.3]) == pytest.approx(0.0, abs=1e-12)
    assert depth_slope([1.0, 0.0]) == pytest.approx(-1.0)
    result = {"x/layer_0": 9.0, "x/layer_1": 1.0, "x/layer_2": 2.0, "x/depth_slope": 5.0}
    assert per_layer(result, "x") == [1.0, 2.0]  # the embeddings (layer 0) left out


def test_models_are_compared_on_the_same_problems_and_seeds(tiny_model, tokenizer):
    def runner(model):
        env = lambda: SingleTurnEnv(exact_reply, exact_reply)  # noqa: E731
        return EpisodeRunner(HFEngine(model, tokenizer), tokenizer, env, SamplingParams(3, 1.0))

    first = runner(tiny_model)
    prompts = [Problem(f"p{i}", f"{i}*{i}=") for i in range(6)]
    greedy = first.collect(prompts, 1, (0,), SamplingParams(3, 0.0))
    problems = [Problem(p.id, p.prompt, t.response_text) for p, t in zip(prompts, greedy)]
    other = build_model("nano", tokenizer, seed=1).eval()
    models = {"a": (tiny_model, tokenizer, first), "b": (tiny_model, tokenizer, runner(tiny_model)),
              "other": (other, tokenizer, runner(other))}  # fmt: skip
    found = compare(models, problems, k=4, seed=0)
    assert found["a"] == found["b"]
    assert found["a"]["ablation/greedy"] == 1.0  # the answers are its greedy replies
    assert found["other"]["ablation/greedy"] < 1.0
    layers = tiny_model.config.num_hidden_layers
    drops = per_layer(found["a"], "ablation")
    assert len(drops) == layers and all(-1.0 <= d <= 1.0 for d in drops)
    assert found["a"]["ablation/depth_slope"] == pytest.approx(depth_slope(drops))
    assert 0.0 <= found["a"]["sampled_accuracy"] <= 1.0
