"""Parason through the trainer: a correct reply whose thread tree shortens its critical path
earns the capped acceleration bonus on the reward the advantages read; others earn nothing."""

import pytest
import torch

from rlvr.config import load_config
from rlvr.train.trainer import Trainer

# product_sum's tokenizer spells each tag as one token and every other character as one
SHORT = (  # 6 + 2 + 3 + 3 + 1 + 6 + 4 + 1 + 6 = 32 tokens, 28 on the path: acceleration 8/7
    "sum is<Parallel><Outlines><Subtask>x</Subtask><Subtask>y</Subtask></Outlines>"
    "<Thread>1234</Thread><Thread>12</Thread></Parallel>#### 7"
)
LONG = (  # 9 + 11 + 11 + 1 = 32 tokens, 21 on the path: acceleration 32/21, over the cap
    "<Parallel><Outlines><Subtask>x</Subtask><Subtask>y</Subtask></Outlines>"
    "<Thread>123456789</Thread><Thread>987654321</Thread></Parallel>"
)
SEQUENTIAL = "12+34 = 46 #### 46"


def test_correct_parallel_replies_earn_the_capped_acceleration_bonus(fast_overrides):
    # the replies are rewritten below, so the warm start only has to exist
    overrides = ["task.name=product_sum", "task.terms=2", "task.digits=1",
                 "algo.parallel_accel_weight=0.5", "algo.parallel_accel_cap=0.2", "train.steps=1",
                 "model.pretrain_steps=2"]  # fmt: skip
    trainer = Trainer(load_config(None, fast_overrides + overrides))
    original, seen = trainer.components.advantage, []

    def spy(inputs, algo):
        seen.append(inputs.rewards.clone())
        return original(inputs, algo)

    trainer.components.advantage = spy
    collect, before = trainer.rollout, []
    # (reply, correct) by position in the group, and each one's expected bonus
    rewrites = [(SHORT, True), (LONG, True), (LONG, False), (SEQUENTIAL, True)]
    expected = [0.5 * (8 / 7 - 1), 0.5 * 0.2, 0.0, 0.0]

    def rewritten_rollout(timings):
        trajectories, baselines, sampling = collect(timings)
        for trajectory in trajectories:
            trajectory.response_text, trajectory.correct = rewrites[trajectory.sample_index % 4]
        before.extend((t.reward, expected[t.sample_index % 4]) for t in trajectories)
        return trajectories, baselines, sampling

    trainer.rollout = rewritten_rollout
    step = trainer.step()
    rewards = torch.tensor([reward + bonus for reward, bonus in before])
    assert torch.allclose(seen[0], rewards.float(), atol=1e-6)
    assert (seen[0] != torch.tensor([reward for reward, _ in before]).float()).sum() == 8
    assert step["parallel/bonus"] == pytest.approx(sum(expected) / 4, abs=1e-6)
    assert step["parallel/acceleration"] == pytest.approx((8 / 7 + 2 * 32 / 21 + 1) / 4)
    assert step["parallel/well_formed"] == 1.0
