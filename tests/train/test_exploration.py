"""RepExp through the trainer: the elliptical bonus reaches the rewards the advantages read, on
the starting policy's representation, only in groups with a correct rollout."""

import copy

import torch

from rlvr.algos.shaping import elliptical_bonus
from rlvr.config import load_config
from rlvr.models.representation import response_hidden_means, sparse_projection, step_seed
from rlvr.rewards import REWARDS
from rlvr.train.trainer import Trainer
from rlvr.types import Batch, Score


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")  # right half the time: most groups are mixed


def test_the_bonus_joins_the_reward_of_groups_with_a_correct_rollout(fast_overrides, monkeypatch):
    monkeypatch.setitem(REWARDS, "numeric", parity)  # the arithmetic task's verifier
    beta = ["algo.elliptical_beta=0.5", "algo.elliptical_dim=8", "train.lr=1e-2"]
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
