import math

import pytest
import torch

from rlvr.algos.shaping import (
    group_zscores,
    overlong_penalty,
    parallel_bonus,
    time_rewards,
)


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


# ---- River's repetition penalty ----


def test_group_zscores_use_the_population_std_and_zero_a_constant_group():
    values = torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0])
    z = group_zscores(values, torch.tensor([0, 0, 0, 1, 1]))
    std = math.sqrt(2 / 3)  # of 1, 2, 3 about their mean 2
    assert torch.allclose(z, torch.tensor([-1 / std, 0.0, 1 / std, 0.0, 0.0], dtype=z.dtype))


def test_parallel_bonus_by_hand():
    acceleration = torch.tensor([1.5, 1.0, 1.1, 1.3])
    structure = torch.tensor([[0.4, 0.0, 0.4], [0.0, 0.0, 0.0], [0.2, 0.1, 0.3], [0.5, 0.0, 0.5]])
    correct, groups = torch.tensor([True, True, False, True]), torch.tensor([0, 0, 0, 1])
    bonus = parallel_bonus(acceleration, structure, correct, groups, 0.5, 0.2, (0.05, 0, 0), 0.1)
    # group 0: accelerations 1.5, 1.0, 1.1 (mean 1.2), subtask shares 0.4, 0, 0.2 (mean 0.2)
    accel_std, subtask_std = math.sqrt((0.09 + 0.04 + 0.01) / 3), math.sqrt(0.08 / 3)
    first = 0.5 * 0.2 + 0.05 * 0.2 / subtask_std + 0.1 * 0.3 / accel_std  # capped at 0.2
    second = 0.5 * 0.0 - 0.05 * 0.2 / subtask_std - 0.1 * 0.2 / accel_std
    # the wrong rollout gets nothing; the lone rollout of group 1 has no spread to score
    expected = torch.tensor([first, second, 0.0, 0.5 * 0.2], dtype=torch.float64)
    assert torch.allclose(bonus, expected)
    assert second < 0  # a slower correct sibling is pushed below its group
