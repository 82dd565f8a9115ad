import torch

from rlvr.types import Batch, Problem, Trajectory


def test_batch_aligns_per_token_fields_with_targets():
    t1 = Trajectory(
        Problem("a", "q"),
        0,
        0,
        token_ids=[5, 6, 7, 8],
        loss_mask=[0, 0, 1, 1],
        behaviour_logprobs=[0.0, 0.0, -0.5, -0.25],
        turn_rewards=[1.0],
        turn_ends=[4],
    )
    t2 = Trajectory(
        Problem("b", "q"),
        1,
        1,
        token_ids=[5, 9, 10],
        loss_mask=[0, 1, 1],
        behaviour_logprobs=[0.0, -1.0, -2.0],
        turn_rewards=[0.0, 0.5],
        turn_ends=[3, 3],
    )
    batch = Batch.from_trajectories([t1, t2], pad_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8], [5, 9, 10, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    # column t describes token t+1
    assert batch.loss_mask.tolist() == [[0, 1, 1], [1, 1, 0]]
    assert torch.equal(
        batch.behaviour_logprobs, torch.tensor([[0.0, -0.5, -0.25], [-1.0, -2.0, 0.0]])
    )
    assert batch.rewards.tolist() == [1.0, 0.5] and batch.group_ids.tolist() == [0, 1]
    # each turn's reward sits on its last policy token (token 3 of t1; token 2 of t2, both turns)
    assert batch.token_rewards.tolist() == [[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]]
    assert t1.num_generated == 2 and len(batch) == 2
