import pytest

from rlvr.rewards.match import NumericMatch, exact_at, exact_match, numeric_match
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
        ("42", "I think it is 42", False),  # no marker: not an answer
        ("33", "22+11=33 #### 33", True),
        ("22+11=33 #### 33", "#### 33", True),  # a worked solution as the reference
        ("Tom has 33. #### 33", "#### Tom has 33.", False),
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
        ("-5", "the answer is -5", False),  # no marker: the default reads no answer
        ("-5", "<answer>-5</answer>", True),
        ("33", "#### 33", True),
        ("22+11=33 #### 33", "work: 22+11=33\n#### 33", True),  # worked-solution reference
        ("22+11=33 #### 33", "#### 34", False),
        ("853", "\u2026756\ufffd96\ufffd 853\ufffd", False),  # digits sprayed by a random model
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


def test_last_number_fallback_is_an_explicit_setting():
    gibberish = "\u2026756\ufffd96\ufffd 853\ufffd"
    strict = numeric_match(problem("853"), gibberish)
    assert strict.value == 0.0 and "no final-answer marker" in strict.info["reason"]
    assert numeric_match(problem("853"), gibberish, fallback="last_number").value == 1.0
    assert numeric_match(problem("-5"), "the answer is -5", fallback="last_number").value == 1.0
    assert NumericMatch.Params().fallback == "none"
    lenient = NumericMatch(NumericMatch.Params(fallback="last_number"))
    assert lenient(problem("853"), gibberish).value == 1.0
    assert NumericMatch()(problem("853"), gibberish).value == 0.0


@pytest.mark.parametrize(
    "response, correct",
    [("bcd", True), ("bcdxy", True), ("xyd", True), ("bcx", False), ("bc", False), ("", False),
     ("d", False), ("bc d", False)],
)  # fmt: skip
def test_exact_at_grades_only_the_character_at_the_answers_place(response, correct):
    score = exact_at(Problem(id="p", prompt="?", answer="d", metadata={"answer_at": 3}), response)
    assert (score.value, score.status) == ((1.0, "ok") if correct else (0.0, "wrong"))


def test_exact_at_needs_the_answers_place():
    with pytest.raises(ValueError, match="answer_at"):
        exact_at(problem("d"), "bcd")
