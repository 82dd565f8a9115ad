import pytest

from rlvr.rewards import REWARDS
from rlvr.rewards.combine import weighted
from rlvr.rewards.solution import solution_prefix
from rlvr.tasks.arithmetic import ArithmeticParams, ArithmeticTask
from rlvr.types import Problem

SOLUTION = "7*4+0=28 3*4+2=14 #### 148"
PROBLEM = Problem(id="p", prompt="37*4=", answer="148", metadata={"solution": SOLUTION})


@pytest.mark.parametrize(
    "reply, value, status",
    [
        (SOLUTION, 1.0, "ok"),
        ("7*4+0=28  3*4+2=14\n#### 148", 1.0, "ok"),  # steps are whitespace-separated
        ("7*4+0=28 3*4+0=12 #### 128", 1 / 4, "wrong"),  # the dropped carry departs at step 2
        ("7*4+0=27 3*4+2=14 #### 148", 0.0, "wrong"),  # a first-step slip earns nothing after it
        ("7*4+0=28 3*4+2=14", 2 / 4, "wrong"),
        (SOLUTION + " extra", 1.0, "wrong"),  # all steps, but not only them
        ("", 0.0, "wrong"),
    ],
)
def test_credit_is_the_matched_prefix(reply, value, status):
    score = solution_prefix(PROBLEM, reply)
    assert score.value == pytest.approx(value)
    assert score.status == status


def test_a_problem_without_a_solution_names_the_fix():
    with pytest.raises(ValueError, match="solution_field"):
        solution_prefix(Problem(id="q", prompt="?", answer="1"), "1")


def test_arithmetic_problems_carry_their_demonstration():
    params = ArithmeticParams(operations=["mul"], digits=3, mul_digits=2, scratchpad="long")
    task = ArithmeticTask(params, seed=0, eval_size=4)
    for problem in [*task.eval_problems(), task.train_problem(0)]:
        demo = task.demonstration(problem)
        assert problem.metadata["solution"] == demo
        assert solution_prefix(problem, demo).value == 1.0
        assert solution_prefix(problem, task.demonstration(problem, flawed=True)).value < 1.0


def test_beside_the_verifier_a_longer_right_prefix_pays_more():
    reward = weighted({"numeric": 1.0, "solution_prefix": 0.5}, REWARDS)
    early = reward(PROBLEM, "7*4+0=27 3*4+2=13 #### 137").value
    late = reward(PROBLEM, "7*4+0=28 3*4+2=13 #### 138").value
    right = reward(PROBLEM, SOLUTION).value
    assert early == pytest.approx(0.0)
    assert late == pytest.approx(0.5 * 1 / 4)
    assert right == pytest.approx(1.5)
