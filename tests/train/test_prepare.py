"""What the update's inputs are built from: each named reward's own value, per trajectory."""

import pytest

from rlvr.train.prepare import reward_components
from rlvr.types import Problem, Trajectory


def test_reward_components_are_each_trajectorys_own_values_in_task_rewards_order():
    def trajectory(components):
        t = Trajectory(Problem("p", "x"), 0, 0, [1, 2], [0, 1], [0.0, 0.0], [1.0], [2])
        t.info["components"] = components
        return t

    values, weights = reward_components(
        [trajectory({"format": 1.0, "numeric": 0.0, "format/extra": 3.0}), trajectory({})],
        {"numeric": 1.0, "format": 0.1},
    )
    assert values.tolist() == [[0.0, 1.0], [0.0, 0.0]]
    assert weights.tolist() == pytest.approx([1.0, 0.1])
    assert reward_components([trajectory({})], {}) == (None, None)
