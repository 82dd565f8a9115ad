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


def test_batch_rows_picks_every_field_of_those_rows_in_order():
    trajectories = [
        Trajectory(
            Problem(f"p{i}", "q", domain=d),
            i,
            0,
            [5, 6 + i],
            [0, 1],
            [0.0, -float(i)],
            [float(i)],
            [2],
        )
        for i, d in enumerate(["add", "sub", "add"])
    ]
    batch = Batch.from_trajectories(trajectories, pad_id=0)
    picked = batch.rows([2, 0])
    assert picked.input_ids.tolist() == [[5, 8], [5, 6]]
    assert picked.behaviour_logprobs.tolist() == [[-2.0], [0.0]]
    assert picked.rewards.tolist() == [2.0, 0.0] and picked.group_ids.tolist() == [2, 0]
    assert len(picked) == 2
    assert picked.turn_rewards.tolist() == [[2.0], [0.0]]


def test_batch_concat_pads_each_field_with_its_own_filler():
    def trajectory(ids, turns):
        n = len(ids)
        return Trajectory(Problem(f"p{n}", "q", domain=f"d{n}"), n, 0, ids, [0] + [1] * (n - 1),
                          [0.0] + [-1.0] * (n - 1), [1.0] * turns, [n] * turns)  # fmt: skip

    wide = Batch.from_trajectories([trajectory([5, 6, 7, 8], 2)], pad_id=0)
    narrow = Batch.from_trajectories([trajectory([5, 6], 1)], pad_id=0)
    both = narrow.concat(wide, pad_id=9)
    assert both.input_ids.tolist() == [[5, 6, 9, 9], [5, 6, 7, 8]]
    assert both.attention_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert both.loss_mask.tolist() == [[1, 0, 0], [1, 1, 1]]
    assert both.behaviour_logprobs.tolist() == [[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]]
    assert both.turn_ids.tolist() == [[0, -1, -1], [0, 0, 0]]  # the second turn is empty
    assert both.token_rewards.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 2.0]]
    assert both.turn_rewards[0, 1].isnan() and both.turn_rewards[1].tolist() == [1.0, 1.0]
    assert both.rewards.tolist() == [1.0, 2.0] and both.group_ids.tolist() == [2, 4]
    assert len(both) == 2
