import pytest

from rlvr.rewards.format import format_reward
from rlvr.types import Problem

PROBLEM = Problem(id="p", prompt="?", answer="1")


@pytest.mark.parametrize(
    "response, value",
    [
        ("7+5+0=12 #### 632", 1.0),
        ("#### 632\n", 1.0),
        (r"So the answer is $\boxed{3}$.", 1.0),
        ("<answer>3</answer>", 1.0),
        ("#### 632 and then I kept talking\nabout it", 0.0),
        (r"\boxed{3} is my guess, but maybe not", 0.0),
        ("the answer is 632", 0.0),
        ("#### ", 0.0),
    ],
)
def test_format(response, value):
    assert format_reward(PROBLEM, response).value == value
