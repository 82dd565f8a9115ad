import pytest

from rlvr.rewards.match import exact_match, numeric_match
from rlvr.types import Problem


def problem(answer):
    return Problem(id="p", prompt="?", answer=answer)


@pytest.mark.parametrize(
    "answer, response, correct",
    [
        ("Paris", "#### Paris.", True),
        ("New  York", "<answer> New York </answer>", True),
        ("Paris", "#### paris", False),  # exact means exact, case included
        ("42", "#### 42.0", False),
        ("42", "no answer at all", False),
    ],
)
def test_exact(answer, response, correct):
    score = exact_match(problem(answer), response)
    assert (score.value, score.status) == ((1.0, "ok") if correct else (0.0, "wrong"))


@pytest.mark.parametrize(
    "answer, response, correct",
    [
        ("1234", "#### 1,234", True),
        ("0.75", "#### 3/4", True),
        ("-5", "the answer is -5", True),
        ("5", "#### +5.", True),
        ("1", "#### 1.0000001", True),  # within 1e-6
        ("1", "#### 1.00001", False),
        ("1000000", "#### 1000000.5", True),  # relative tolerance
        ("632", "7+5+0=12 #### 522", False),
        ("632", "#### six hundred", False),
        ("1", "#### 1/0", False),
        ("1", "#### 1e3", False),  # exponents are refused (Fraction would build the integer)
        ("1", "#### " + "9" * 400, False),  # no float overflow
    ],
)
def test_numeric(answer, response, correct):
    score = numeric_match(problem(answer), response)
    assert (score.value, score.status) == ((1.0, "ok") if correct else (0.0, "wrong"))


def test_numeric_refuses_a_reference_that_is_not_a_number():
    with pytest.raises(ValueError, match="not a number"):
        numeric_match(problem("Paris"), "#### 1")


def test_numeric_reads_a_quantity_with_units_and_takes_a_tolerance():
    assert numeric_match(problem("12"), "#### 12 dollars").value == 1.0
    assert numeric_match(problem("3.14159"), "#### 3.1416").value == 0.0
    assert numeric_match(problem("3.14159"), "#### 3.1416", tolerance=1e-3).value == 1.0
