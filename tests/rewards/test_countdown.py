import pytest

from rlvr.rewards.countdown import countdown_check, final_expression
from rlvr.types import Problem

PROBLEM = Problem(
    id="c",
    prompt="Make 46 from 3 7 25",
    answer="46",
    metadata={"numbers": [3, 7, 25], "target": 46},
)


def check(response, problem=PROBLEM):
    return countdown_check(problem, response)


@pytest.mark.parametrize(
    "response",
    ["3*7=21 25+21=46 #### 25+3*7", "#### (7*3)+25", "thinking\n25 + 7 * 3", r"\boxed{3*7+25}"],
)
def test_accepts_correct_expressions(response):
    assert (check(response).value, check(response).status) == (1.0, "ok")


def test_may_leave_numbers_unused_and_divides_exactly():
    problem = Problem(
        id="d", prompt="", answer="5", metadata={"numbers": [10, 4, 2, 9], "target": 5}
    )
    assert check("#### 10/2", problem).status == "ok"
    assert check("#### (10-4/2)*5/8", problem).status == "wrong"  # 5 and 8 are not given
    assert check("#### 9/(4/2)+1/2", problem).info["reason"].startswith("uses numbers")


@pytest.mark.parametrize(
    "response, reason",
    [
        ("#### 25+3*7+3", "uses numbers"),  # 3 used twice
        ("#### 25+21", "uses numbers"),  # foreign number
        ("#### 25+3+7", "equals 35"),
        ("#### 25/(7-7)", "division by zero"),
        ("#### 3**7", "only integers"),
        ("#### 25//3", "only integers"),
        ("#### -3+7+25", "only integers"),  # unary minus
        ("#### (3)(7)", "only integers"),  # a call
        ("#### 3 7", "not an expression"),
        ("#### 0x19+21", "only integers"),
        ("#### 25+3*7=46", "only integers"),
        ("", "only integers"),
        ("#### " + "+".join(["1"] * 150), "too long"),
    ],
)
def test_rejects_with_a_reason(response, reason):
    score = check(response)
    assert (score.value, score.status) == (0.0, "wrong")
    assert reason in score.info["reason"]


@pytest.mark.parametrize(
    "hostile",
    [
        "__import__('os').system('touch /tmp/rlvr_pwned')",
        "#### __import__('os').system('touch /tmp/rlvr_pwned')",
        "#### (lambda: 46)()",
        "#### [x for x in ().__class__.__bases__[0].__subclasses__()]",
        "#### 46 if True else 0",
    ],
)
def test_hostile_strings_are_wrong_and_never_run(hostile, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check(hostile).status == "wrong"
    assert not (tmp_path / "rlvr_pwned").exists()


def test_final_expression_prefers_the_marker_then_the_last_line():
    assert final_expression("3*7=21\n#### 25+3*7\nbye") == "25+3*7"
    assert final_expression("steps\n25+3*7\n\n") == "25+3*7"
