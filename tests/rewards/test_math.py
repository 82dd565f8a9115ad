import threading

import pytest

from rlvr.rewards.math import math_equal
from rlvr.types import Problem


def score(answer, response, fallback="none"):
    return math_equal(Problem(id="p", prompt="?", answer=answer), response, fallback)


@pytest.mark.parametrize(
    "answer, response",
    [
        ("${1,2,3,4}$", r"so \boxed{{1,3} \cup {2,4}}"),  # math-verify's README example
        (r"\frac{1}{2}", "#### 0.5"),
        (r"\sqrt{2}", r"<answer>\sqrt{2}</answer>"),  # bare LaTeX reference needs $...$
        ("1234", "#### 1,234"),
        ("2500", "#### $2,500."),
        ("x^2+1", r"\boxed{1+x^2}"),
        ("22+11=33 #### 33", "#### 33"),  # a worked solution as the reference
    ],
)
def test_equivalent_answers(answer, response):
    assert (score(answer, response).value, score(answer, response).status) == (1.0, "ok")


@pytest.mark.parametrize(
    "answer, response",
    [
        (r"\frac{1}{2}", "#### 0.25"),
        (r"\sqrt{2}", r"\boxed{2}"),
        ("3", "I do not know"),
        ("22+11=33 #### 33", "#### 22"),  # the reference's answer, not its first number
    ],
)
def test_different_answers(answer, response):
    assert (score(answer, response).value, score(answer, response).status) == (0.0, "wrong")


def test_an_unmarked_answer_scores_only_with_the_free_text_fallback():
    # Gibberish whose last number is right must not pay by default.
    assert score("853", "756 96 853").value == 0.0
    assert score("853", "756 96 853").info["reason"].startswith("no final-answer marker")
    assert score("0.5", r"The answer is $\frac{1}{2}$", "free_text").value == 1.0
    assert score("0.5", r"The answer is $\frac{1}{2}$").value == 0.0


def test_math_reward_params_are_validated():
    from rlvr.rewards import REWARDS

    reward = REWARDS["math"](REWARDS["math"].Params(fallback="free_text"))
    assert reward(Problem(id="p", prompt="?", answer="7"), "it is 7").value == 1.0
    with pytest.raises(ValueError, match="fallback"):
        REWARDS["math"].Params(fallback="last_number")


def test_works_outside_the_main_thread_without_math_verifys_timeout_notice(monkeypatch, caplog):
    # math-verify's default SIGALRM timeout raises in threads; the reward must not, and the
    # notice math-verify prints once when its timeout is off stays silent (rlvr times rewards)
    import math_verify.grader
    import math_verify.parser

    for module in (math_verify.grader, math_verify.parser):
        monkeypatch.setattr(module, "TIMEOUT_WARNING_SHOWN", False)
    results = []
    thread = threading.Thread(target=lambda: results.append(score(r"\frac{1}{2}", "#### 0.5")))
    with caplog.at_level("WARNING"):
        thread.start()
        thread.join()
    assert results[0].status == "ok"
    assert math_verify.parser.TIMEOUT_WARNING_SHOWN  # the notice was due, and was filtered
    assert "Timeout is disabled" not in caplog.text


@pytest.mark.parametrize(
    "answer, response, value",
    [
        ("(0,1]", r"\boxed{(0, 1]}", 1.0),  # intervals keep their brackets
        ("(0,1]", r"\boxed{[0, 1]}", 0.0),
        ("5", r"\boxed{5\text{ cm}}", 1.0),  # LaTeX units
        ("12", "#### 12 dollars", 1.0),  # plain-text units
        ("3", "#### 3 pi", 0.0),  # pi is not a unit
        (r"10^{3}", r"\boxed{1000}", 1.0),
        (r"90^\circ", r"\boxed{90}", 1.0),
    ],
)
def test_intervals_units_and_powers(answer, response, value):
    assert score(answer, response).value == value
