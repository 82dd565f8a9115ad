"""RepExp: the representation it reads, its elliptical bonus by hand, and the bonus reaching
the rewards through the trainer."""

import copy

import pytest
import torch

from rlvr.config import load_config
from rlvr.methods.repexp import (
    backbone,
    elliptical_bonus,
    response_hidden_means,
    sparse_projection,
    step_seed,
)
from rlvr.rewards import REWARDS
from rlvr.train.trainer import Trainer
from rlvr.types import Batch, Problem, Score, Trajectory


def batch_of(lengths: list[tuple[int, int]], pad_id: int) -> Batch:
    """Rows of `prompt` untrained tokens then `reply` policy tokens, right-padded."""
    trajectories = []
    for i, (prompt, reply) in enumerate(lengths):
        ids = [(7 * i + 3 * j) % 40 + 5 for j in range(prompt + reply)]
        mask = [0] * prompt + [1] * reply
        trajectories.append(
            Trajectory(Problem(str(i), "x"), i, 0, ids, mask, [0.0] * len(ids), [1.0], [len(ids)])
        )
    return Batch.from_trajectories(trajectories, pad_id)


def test_hidden_means_average_the_final_hidden_states_over_the_reply_alone(tiny_model, tokenizer):
    lengths = [(3, 4), (5, 1), (2, 7)]
    batch = batch_of(lengths, tokenizer.pad_token_id)
    means = response_hidden_means(tiny_model, batch, micro_batch_size=2)
    for row, (prompt, reply) in enumerate(lengths):
        ids = batch.input_ids[row : row + 1, : prompt + reply]  # alone, unpadded
        with torch.no_grad():
            hidden = tiny_model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0]
        expected = hidden[prompt:].mean(0)  # the reply's positions, after the final norm
        assert torch.allclose(means[row], expected, atol=1e-5)


def test_backbone_is_the_stack_under_the_head(tiny_model):
    assert backbone(tiny_model) is tiny_model.model
    with pytest.raises(ValueError, match="drop methods.repexp"):
        backbone(torch.nn.Linear(2, 2))


def test_sparse_projection_is_seeded_sparse_and_nearly_keeps_distances():
    projection = sparse_projection(1024, 64, seed=3)
    assert projection.shape == (1024, 64)
    assert torch.equal(projection, sparse_projection(1024, 64, seed=3))
    assert not torch.equal(projection, sparse_projection(1024, 64, seed=4))
    assert (projection != 0).float().mean() == pytest.approx(1 / 32, rel=0.2)  # 1/sqrt(1024)
    points = torch.randn(20, 1024, generator=torch.Generator().manual_seed(0))
    ratio = torch.pdist(points @ projection) / torch.pdist(points)
    assert 0.6 < ratio.min() and ratio.max() < 1.4  # Johnson-Lindenstrauss at 64 dimensions


def test_step_seeds_differ_by_step_and_repeat_on_resume():
    assert step_seed(0, 5) == step_seed(0, 5)
    assert len({step_seed(0, s) for s in range(100)} | {step_seed(1, 0)}) == 101


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")  # right half the time: most groups are mixed


def test_the_bonus_joins_the_reward_of_groups_with_a_correct_rollout(fast_overrides, monkeypatch):
    monkeypatch.setitem(REWARDS, "numeric", parity)  # the arithmetic task's verifier
    beta = ["methods.repexp.beta=0.5", "methods.repexp.dim=8", "train.lr=1e-2"]
    trainer = Trainer(load_config(None, fast_overrides + ["train.steps=2", *beta]))
    start = copy.deepcopy(trainer.model)
    original, seen = trainer.components.advantage, []

    def spy(inputs, algo):
        seen.append(inputs.rewards.clone())
        return original(inputs, algo)

    trainer.components.advantage = spy
    batches = []
    collect = trainer.rollout

    def keep_rollout(timings):
        trajectories, baselines, sampling = collect(timings)
        batches.append(([(t.reward, t.correct) for t in trajectories], trajectories))
        return trajectories, baselines, sampling

    trainer.rollout = keep_rollout
    step = {}
    for _ in range(2):
        step = trainer.step()
        trainer.state["step"] += 1
    assert "time/exploration" in step and 0 < step["exploration/groups"] <= 1

    # the second step's bonus, recomputed from the untouched start and that step's projection
    before, trajectories = batches[1]  # rewards and correctness before the bonus
    batch = Batch.from_trajectories(trajectories, trainer.tokenizer.pad_token_id)
    rewards, correct = torch.tensor([r for r, _ in before]), torch.tensor([c for _, c in before])
    projection = sparse_projection(
        trainer.model.config.hidden_size, 8, step_seed(trainer.cfg.train.seed, 1)
    )

    def with_bonus(model):
        features = response_hidden_means(model, batch, 4) @ projection
        return rewards + 0.5 * elliptical_bonus(features, batch.group_ids, correct, 0.01)

    assert torch.allclose(seen[1], with_bonus(start).float(), atol=1e-5)
    assert not torch.allclose(seen[1], with_bonus(trainer.model.eval()).float(), atol=1e-3)
    for group in batch.group_ids.unique():  # no correct rollout: no bonus
        rows = batch.group_ids == group
        if not correct.bool()[rows].any():
            assert torch.equal(seen[1][rows], rewards[rows].float())
    assert (seen[1] != rewards).any()


def test_elliptical_bonus_is_the_leverage_within_the_group():
    # one group of 2 in 1-D: centred -1 and 1, Sigma = 0.5 + 2, leverage 1 / 2.5 each; the other
    # group, 3 in 2-D around (2/3, 1), was worked by hand: Sigma = [[11/3, -2], [-2, 7]] (lam 1)
    one_d = elliptical_bonus(
        torch.tensor([[1.0], [3.0]]), torch.tensor([0, 0]), torch.tensor([True, False]), lam=0.5
    )
    assert one_d.tolist() == pytest.approx([0.4, 0.4])
    two_d = elliptical_bonus(
        torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]]), torch.tensor([5, 5, 5]),
        torch.tensor([False, False, True]), lam=1.0,
    )  # fmt: skip
    assert float(two_d[0]) == pytest.approx(17 / 39)


def test_elliptical_leave_one_out_inverts_sigma_without_the_rollout():
    features = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    groups, correct = torch.tensor([0, 0, 0, 1, 1, 1]), torch.ones(6, dtype=torch.bool)
    bonus = elliptical_bonus(features, groups, correct, lam=0.1, leave_one_out=True)
    for i in range(6):
        h = features[groups == groups[i]].double()
        h = h - h.mean(0)
        row = features[i].double() - features[groups == groups[i]].double().mean(0)
        sigma = 0.1 * torch.eye(3, dtype=torch.float64) + h.T @ h - torch.outer(row, row)
        assert float(bonus[i]) == pytest.approx(float(row @ torch.linalg.inv(sigma) @ row))


def test_elliptical_bonus_favours_the_odd_one_out_and_skips_groups_with_nothing_right():
    features = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]] * 2)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    correct = torch.tensor([True] * 4 + [False] * 4)
    bonus = elliptical_bonus(features, groups, correct, lam=0.01)
    assert bonus[3] > bonus[0] == bonus[1] == bonus[2] > 0  # the one unlike its siblings
    assert bonus[4:].tolist() == [0.0] * 4  # no correct rollout in group 1
