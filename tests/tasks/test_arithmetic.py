import pytest
from pydantic import ValidationError

from rlvr.rewards import REWARDS
from rlvr.rewards.answers import extract_answer
from rlvr.rewards.base import as_reward_fn
from rlvr.tasks import TASKS
from rlvr.tasks.arithmetic import ArithmeticParams, ArithmeticTask
from rlvr.types import Problem

ALL_OPS = ArithmeticParams(operations=["add", "sub", "mul"])


def task(params=ALL_OPS, seed=0, eval_size=100):
    return ArithmeticTask(params, seed=seed, eval_size=eval_size)


def demo(op, a, b, flawed=False, params=ALL_OPS):
    problem = Problem(id="x", prompt="", metadata={"op": op, "a": a, "b": b})
    return task(params, eval_size=1).demonstration(problem, flawed)


@pytest.mark.parametrize(
    "op, a, b, correct, flawed",
    [
        (
            "add",
            347,
            285,
            "7+5+0=12 4+8+1=13 3+2+1=6 #### 632",
            "7+5+0=12 4+8+0=12 3+2+0=5 #### 522",
        ),
        (
            "add",
            947,
            285,
            "7+5+0=12 4+8+1=13 9+2+1=12 #### 1232",
            "7+5+0=12 4+8+0=12 9+2+0=11 #### 1122",
        ),
        ("add", 123, 456, "3+6+0=9 2+5+0=7 1+4+0=5 #### 579", "3+6+0=9 2+5+0=7 1+4+0=5 #### 579"),
        ("sub", 742, 185, "12-5-0=7 14-8-1=5 7-1-1=5 #### 557", "5-2-0=3 8-4-0=4 7-1-0=6 #### 643"),
        ("sub", 500, 499, "10-9-0=1 10-9-1=0 5-4-1=0 #### 1", "9-0-0=9 9-0-0=9 5-4-0=1 #### 199"),
        (
            "mul",
            347,
            5,
            "7*5+0=35 4*5+3=23 3*5+2=17 #### 1735",
            "7*5+0=35 4*5+0=20 3*5+0=15 #### 1505",
        ),
        ("mul", 347, 25, "347*5=1735 347*20=6940 #### 8675", "347*5=1505 347*20=6840 #### 8345"),
    ],
)
def test_golden_demonstrations(op, a, b, correct, flawed):
    assert demo(op, a, b) == correct
    assert demo(op, a, b, flawed=True) == flawed


def test_problem_shape():
    problem = task(ArithmeticParams(operations=["sub"])).train_problem(0)
    a, b = problem.metadata["a"], problem.metadata["b"]
    assert problem.prompt == f"{a}-{b}=" and problem.id == f"arith-{a}-{b}"
    assert a >= b and 100 <= b <= 999 and problem.answer == str(a - b)


def _carries(op, a, b):
    """Whether the column method carries or borrows into a next column, by place-value arithmetic."""
    if op == "mul" and b >= 10:
        return any(_carries("mul", a, int(m)) for m in str(b))
    # The last k digits of each operand, for every column but the top one.
    tails = [(a % 10**k, b % 10**k, 10**k) for k in range(1, len(str(a)))]
    if op == "add":
        return any(x + y >= place for x, y, place in tails)
    if op == "sub":
        return any(x < y for x, y, _ in tails)
    return any(x * b >= place for x, _, place in tails)


@pytest.mark.parametrize(
    "params",
    [
        ALL_OPS,
        ArithmeticParams(operations=["mul"], digits=4, mul_digits=3),
        ArithmeticParams(operations=["add", "sub"], digits=2),
    ],
)
def test_demonstrations_verify_and_flawed_ones_fail_when_a_carry_matters(params):
    t = task(params, eval_size=20)
    numeric = as_reward_fn(REWARDS[t.verifier])
    flaw_mattered = 0
    for i in range(200):
        problem = t.train_problem(i)
        assert numeric(problem, t.demonstration(problem)).status == "ok"
        flawed = t.demonstration(problem, flawed=True)
        meta = problem.metadata
        if _carries(meta["op"], meta["a"], meta["b"]):
            assert numeric(problem, flawed).status == "wrong", flawed
            flaw_mattered += 1
        else:
            assert extract_answer(flawed) == problem.answer
    assert flaw_mattered > 50


def test_train_and_eval_are_disjoint_and_eval_is_unique():
    t = task(ArithmeticParams(digits=2), eval_size=500)  # 8100 problems: collisions are frequent
    eval_ids = [p.id for p in t.eval_problems()]
    assert len(eval_ids) == len(set(eval_ids)) == 500
    assert not {t.train_problem(i).id for i in range(3000)} & set(eval_ids)


def test_deterministic_in_seed_and_index():
    a, b, other = task(seed=1), task(seed=1), task(seed=2)
    assert [a.train_problem(i) for i in range(50)] == [b.train_problem(i) for i in range(50)]
    assert a.eval_problems() == b.eval_problems()
    assert a.eval_problems() != other.eval_problems()
    assert [a.train_problem(i) for i in range(50)] != [other.train_problem(i) for i in range(50)]
    assert len({a.train_problem(i).id for i in range(50)}) > 45


def test_too_few_problems_for_the_eval_set_is_an_error():
    with pytest.raises(ValueError, match="eval_size"):
        task(ArithmeticParams(digits=1), eval_size=82)  # only 9*9 additions exist
    full = task(ArithmeticParams(digits=1), eval_size=81)
    with pytest.raises(ValueError, match="eval set covers"):
        full.train_problem(0)


def test_a_list_of_digits_mixes_problem_sizes_and_every_one_verifies():
    t = task(ArithmeticParams(digits=[1, 2, 4]), eval_size=50)
    problems = [t.train_problem(i) for i in range(300)]
    sizes = [len(str(p.metadata["a"])) for p in problems]
    assert set(sizes) == {1, 2, 4}
    assert min(sizes.count(d) for d in (1, 2, 4)) > 60  # drawn uniformly: about 100 each
    for p in problems:  # both operands of an addition have the problem's digit count
        assert len(str(p.metadata["a"])) == len(str(p.metadata["b"]))
    numeric = as_reward_fn(REWARDS[t.verifier])
    assert all(numeric(p, t.demonstration(p)).status == "ok" for p in problems)
    assert {len(str(p.metadata["a"])) for p in t.eval_problems()} == {1, 2, 4}
    with pytest.raises(ValidationError):
        ArithmeticParams(digits=[])
    with pytest.raises(ValidationError):
        ArithmeticParams(digits=[2, 10])


def test_params_reject_unknown_keys_and_bad_values():
    with pytest.raises(ValidationError):
        ArithmeticParams(operations=["div"])
    with pytest.raises(ValidationError):
        ArithmeticParams(digitz=3)
    with pytest.raises(ValidationError):
        ArithmeticParams(digits=10)
    assert all(f.description for f in ArithmeticParams.model_fields.values())
    assert TASKS["arithmetic"] is ArithmeticTask


LONG_MUL = ArithmeticParams(operations=["mul"], digits=4, mul_digits=3, scratchpad="long")


def test_long_scratchpad_works_each_partial_product_and_the_column_sums():
    correct = (
        "347*5: 7*5+0=35 4*5+3=23 3*5+2=17 =1735 347*2: 7*2+0=14 4*2+1=9 3*2+0=6 =6940 "
        "5+0+0=5 3+4+0=7 7+9+0=16 1+6+1=8 #### 8675"
    )
    # every carry dropped, in the partial products and in the sum: 1505 + 6840 summed as 7345
    flawed = (
        "347*5: 7*5+0=35 4*5+0=20 3*5+0=15 =1505 347*2: 7*2+0=14 4*2+0=8 3*2+0=6 =6840 "
        "5+0+0=5 0+4+0=4 5+8+0=13 1+6+0=7 #### 7345"
    )
    assert demo("mul", 347, 25, params=LONG_MUL) == correct
    assert demo("mul", 347, 25, flawed=True, params=LONG_MUL) == flawed
    assert demo("mul", 347, 5, params=LONG_MUL) == demo("mul", 347, 5)  # one digit: one line


def test_long_scratchpad_demonstrations_verify_and_run_to_hundreds_of_characters():
    t = task(LONG_MUL, eval_size=20)
    numeric = as_reward_fn(REWARDS[t.verifier])
    lengths, wrong_when_flawed = [], 0
    for i in range(200):
        problem = t.train_problem(i)
        solution = t.demonstration(problem)
        assert numeric(problem, solution).status == "ok"
        wrong_when_flawed += numeric(problem, t.demonstration(problem, flawed=True)).status != "ok"
        lengths.append(len(solution))
    assert min(lengths) > 150 and wrong_when_flawed > 180
