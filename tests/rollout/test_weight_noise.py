"""3PO's posterior over the weights: its scale, its draws, and which replies each draw samples."""

import copy

import torch

from rlvr.models.lora import trainable_state_dict
from rlvr.rollout import EpisodeRunner, HFEngine, SamplingParams
from rlvr.rollout.weight_noise import WeightNoise, posterior_std, weight_sample_of
from rlvr.types import Problem, StepResult


def test_posterior_std_is_ivons_scale():
    h = torch.tensor([0.0, 0.3])
    # 1 / sqrt(100 * 0.1) and 1 / sqrt(100 * 0.4)
    expected = torch.tensor([10**-0.5, 40**-0.5])
    assert torch.allclose(posterior_std(h, ess=100.0, floor=0.1), expected)


def test_each_groups_replies_split_into_contiguous_runs_per_draw():
    assert [weight_sample_of(i, 4, 2) for i in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [weight_sample_of(i, 6, 3) for i in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [weight_sample_of(i, 4, 1) for i in range(4)] == [0] * 4


def snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainable_state_dict(model).items()}


def test_a_draw_is_the_mean_plus_sigma_times_its_seeds_noise_and_leaves_the_mean(tiny_model):
    model = copy.deepcopy(tiny_model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99))
    model(
        input_ids=torch.tensor([[5, 6, 7, 8]]), labels=torch.tensor([[5, 6, 7, 8]])
    ).loss.backward()
    optimizer.step()  # the posterior's h is now the optimizer's second moment
    noise = WeightNoise(model, optimizer, samples=2, ess=1e3, floor=0.01)
    mean = snapshot(model)
    name, param = next(iter(trainable_state_dict(model).items()))
    h = optimizer.state[param]["exp_avg_sq"] / (1 - 0.99)  # bias-corrected after one step
    z = torch.randn(param.shape, generator=torch.Generator().manual_seed(11))
    with noise.sampled(11):
        drawn = snapshot(model)
        assert torch.allclose(drawn[name], mean[name] + (1e3 * (h + 0.01)).rsqrt() * z)
    with noise.sampled(11):
        assert all(torch.equal(drawn[k], v) for k, v in snapshot(model).items())
    with noise.sampled(12):
        assert not torch.equal(snapshot(model)[name], drawn[name])
    assert all(torch.equal(mean[k], v) for k, v in snapshot(model).items())
    metrics = noise.metrics()
    assert 0 < metrics["weight_sigma_min"] <= metrics["weight_sigma_mean"] <= (1e3 * 0.01) ** -0.5
    assert 0 < metrics["weight_curvature_share"] < 1


def checksum(model) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


class TwoTurns:
    def reset(self, problem):
        self.turn = 0
        return problem.messages()

    def step(self, action_text):
        self.turn += 1
        return StepResult(observation="again", reward=1.0, done=self.turn == 2)


def test_each_reply_samples_under_its_draws_weights_on_every_turn(tiny_model, tokenizer):
    """A group of 4 over 2 draws: replies 0-1 under draw 0, 2-3 under draw 1, and a multi-turn
    episode keeps its draw's weights on its second turn."""
    model = copy.deepcopy(tiny_model)
    optimizer = torch.optim.AdamW(model.parameters())
    noise = WeightNoise(model, optimizer, samples=2, ess=1e3, floor=1.0)
    seen = []  # (turn-ordered) the rows of each engine call and a checksum of its weights

    class Watched(HFEngine):
        def generate(self, prompts, params, seeds=None):
            weights = checksum(model)
            seen.append((len(prompts), weights))
            return super().generate(prompts, params, seeds)

    runner = EpisodeRunner(
        Watched(model, tokenizer), tokenizer, TwoTurns, SamplingParams(6, 1.0), max_turns=2
    )
    mean = checksum(model)
    out = runner.collect([Problem("a", "hi"), Problem("b", "ho")], 4, (0, 0, 3), noise=noise)
    assert [n for n, _ in seen] == [4, 4, 4, 4]  # per turn: draw 0's 4 rows, then draw 1's
    draw0, draw1 = seen[0][1], seen[1][1]
    assert len({draw0, draw1, mean}) == 3 and [w for _, w in seen[2:]] == [draw0, draw1]
    assert checksum(model) == mean
    plain = runner.collect([Problem("a", "hi"), Problem("b", "ho")], 4, (0, 0, 3))
    assert [t.token_ids for t in out] != [t.token_ids for t in plain]
    assert seen[-1][1] == mean and seen[-1][0] == 8  # without noise: one call at the mean
