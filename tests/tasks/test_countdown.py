import pytest
from pydantic import ValidationError

from rlvr.rewards import REWARDS
from rlvr.rewards.countdown import evaluate_expression, final_expression
from rlvr.tasks import TASKS
from rlvr.tasks.countdown import CountdownParams, CountdownTask, render
from rlvr.types import Problem


def task(params=None, seed=0, eval_size=100):
    return CountdownTask(params or CountdownParams(), seed=seed, eval_size=eval_size)


def problem_for(tree, numbers, target):
    return Problem(
        id="c",
        prompt=f"Make {target} from {' '.join(map(str, numbers))}",
        answer=str(target),
        metadata={"numbers": numbers, "target": target, "tree": tree},
    )


def test_golden_demonstrations():
    problem = problem_for(["+", 25, ["*", 7, 3]], [3, 7, 25], 46)
    t = task(eval_size=1)
    assert t.demonstration(problem) == "7*3=21 25+21=46 #### 25+7*3"
    # The flaw: the last step uses the wrong operation, and the expression says so.
    assert t.demonstration(problem, flawed=True) == "7*3=21 25*21=525 #### 25*7*3"
    problem = problem_for(["*", ["-", 10, 4], ["/", 8, 2]], [2, 4, 8, 10], 24)
    assert t.demonstration(problem) == "10-4=6 8/2=4 6*4=24 #### (10-4)*8/2"
    assert t.demonstration(problem, flawed=True) == "10-4=6 8/2=4 6+4=10 #### 10-4+8/2"


@pytest.mark.parametrize(
    "tree, text",
    [
        (["-", 9, ["-", 5, 2]], "9-(5-2)"),
        (["-", ["-", 9, 5], 2], "9-5-2"),
        (["/", 24, ["*", 3, 2]], "24/(3*2)"),
        (["*", ["+", 1, 2], 3], "(1+2)*3"),
        (["+", 1, ["-", 5, 2]], "1+5-2"),
    ],
)
def test_render_keeps_needed_parentheses_only(tree, text):
    assert render(tree) == text


@pytest.mark.parametrize(
    "params",
    [CountdownParams(), CountdownParams(count=6), CountdownParams(count=2, max_number=1000)],
)
def test_demonstrations_pass_the_checker_and_flawed_ones_fail(params):
    t = task(params, eval_size=20)
    check = REWARDS[t.verifier]
    for i in range(200):
        problem = t.train_problem(i)
        assert problem.metadata["target"] <= params.max_target
        assert check(problem, t.demonstration(problem)).status == "ok"
        flawed = t.demonstration(problem, flawed=True)
        value, used = evaluate_expression(final_expression(flawed))
        assert (
            sorted(used) == problem.metadata["numbers"]
        )  # the flaw is in the steps, not the copying
        expected = "ok" if value == problem.metadata["target"] else "wrong"  # 2+2 == 2*2
        assert check(problem, flawed).status == expected


def test_problem_shape():
    problem = task().train_problem(0)
    numbers, target = problem.metadata["numbers"], problem.metadata["target"]
    assert len(numbers) == 3 and numbers == sorted(numbers) and all(1 <= n <= 20 for n in numbers)
    assert problem.prompt == f"Make {target} from {' '.join(map(str, numbers))}"
    assert problem.answer == str(target)


def test_train_and_eval_are_disjoint():
    t = task(CountdownParams(count=2, max_number=10), eval_size=100)
    eval_ids = {p.id for p in t.eval_problems()}
    assert len(eval_ids) == 100
    assert not {t.train_problem(i).id for i in range(3000)} & eval_ids


def test_deterministic_in_seed_and_index():
    a, b, other = task(seed=3), task(seed=3), task(seed=4)
    assert [a.train_problem(i) for i in range(50)] == [b.train_problem(i) for i in range(50)]
    assert a.eval_problems() == b.eval_problems() != other.eval_problems()
    assert [a.train_problem(i) for i in range(50)] != [other.train_problem(i) for i in range(50)]


def test_params_are_validated():
    with pytest.raises(ValidationError):
        CountdownParams(count=7)
    with pytest.raises(ValidationError):
        CountdownParams(numbers=3)
    assert all(f.description for f in CountdownParams.model_fields.values())
    assert TASKS["countdown"] is CountdownTask
