import pytest
import torch

from rlvr.algos.shaping import overlong_penalty, time_rewards


def test_overlong_penalty_golden():
    lengths = torch.tensor([10, 12, 14, 16, 20])
    # budget 16, window 4: free up to 12, then -(L-12)/4, capped at -1 (DAPO eq. 13)
    assert overlong_penalty(lengths, 16, 4, 1.0).tolist() == [0.0, 0.0, -0.5, -1.0, -1.0]
    assert overlong_penalty(lengths, 16, 4, 0.5).tolist() == [0.0, 0.0, -0.25, -0.5, -0.5]
    assert overlong_penalty(lengths, 16, 0, 1.0).tolist() == [0.0] * 5


@pytest.mark.parametrize(
    "timing, expected",
    [("per_turn", [0.1, 0.0, 1.0]), ("delayed", [0.0, 0.0, 1.1]), ("terminal", [0.0, 0.0, 1.0])],
)
def test_reward_timing_moves_turn_rewards(timing, expected):
    assert time_rewards([0.1, 0.0, 1.0], timing) == pytest.approx(expected)
    assert time_rewards([0.5], timing) == [0.5]
