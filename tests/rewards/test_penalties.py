import pytest
from pydantic import ValidationError

from rlvr.rewards.penalties import LengthPenalty, RepetitionPenalty
from rlvr.types import Problem

PROBLEM = Problem(id="p", prompt="?")


@pytest.mark.parametrize(
    "length, expected", [(0, 0.0), (100, 0.0), (150, -0.25), (300, -1.0), (5000, -1.0)]
)
def test_length_penalty_is_zero_to_target_then_linear_to_minus_one(length, expected):
    penalty = LengthPenalty(LengthPenalty.Params(target_chars=100, max_chars=300))
    score = penalty(PROBLEM, "x" * length)
    assert score.value == pytest.approx(expected) and score.status == "ok"


def test_length_penalty_needs_a_max_beyond_the_target():
    with pytest.raises(ValidationError, match="max_chars"):
        LengthPenalty.Params(target_chars=300, max_chars=100)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("the cat sat on the mat", 0.0),  # 4 distinct trigrams
        ("a b c a b c", -1 / 4),  # trigrams abc bca cab abc: one repeat of four
        ("go go go go go", -2 / 3),  # (go go go) x3: two repeats
        ("too short", 0.0),
        ("", 0.0),
    ],
)
def test_repetition_penalty_counts_repeated_trigrams(text, expected):
    assert RepetitionPenalty()(PROBLEM, text).value == pytest.approx(expected)
