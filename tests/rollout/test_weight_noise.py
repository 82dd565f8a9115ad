"""3PO's weight draws as sampling sees them: which replies each draw samples, under its weights
(the posterior's own tests are tests/methods/test_c3po.py)."""

import copy

import pytest

from rlvr.methods.c3po import Posterior
from rlvr.rollout import EpisodeRunner, HFEngine, SamplingParams
from rlvr.rollout.weight_noise import weight_sample_of
from rlvr.types import Problem, StepResult


def test_each_groups_replies_split_into_contiguous_runs_per_draw():
    assert [weight_sample_of(i, 4, 2) for i in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [weight_sample_of(i, 6, 3) for i in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [weight_sample_of(i, 4, 1) for i in range(4)] == [0] * 4


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
    IVON = pytest.importorskip("ivon").IVON
    noise = Posterior(IVON(model.parameters(), lr=0.1, ess=1e3), samples=2)
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
