import math
import threading

import pytest

from rlvr.rewards.base import score_safely
from rlvr.types import Problem, Score

PROBLEM = Problem(id="p", prompt="1+1=", answer="2")


def call(result):
    return score_safely(lambda problem, response: result, PROBLEM, "#### 2")


def test_raising_reward_is_a_crash_with_the_error():
    def broken(problem, response):
        raise RuntimeError("sandbox fell over")

    score = score_safely(broken, PROBLEM, "x")
    assert score == Score(0.0, "crash", {"error": "RuntimeError: sandbox fell over"})


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, -math.inf, "1.0", [1.0]])
def test_junk_returns_are_crashes_that_say_what_came_back(bad):
    score = call(bad)
    assert score.value == 0.0 and score.status == "crash"
    assert repr(bad) in score.info["error"]


@pytest.mark.parametrize("bad", [Score(math.nan), Score(1.0, "great")])
def test_invalid_scores_are_crashes(bad):
    assert call(bad).status == "crash" and call(bad).value == 0.0


@pytest.mark.parametrize(
    "plain, expected", [(1, Score(1.0, "ok")), (0.0, Score(0.0, "wrong")), (True, Score(1.0, "ok"))]
)
def test_plain_numbers_are_wrapped(plain, expected):
    assert call(plain) == expected


def test_a_good_score_passes_through():
    good = Score(0.5, "timeout", {"why": "slow"})
    assert call(good) == good


def test_a_hung_reward_times_out_and_a_quick_one_does_not():
    release = threading.Event()

    def hangs(problem, response):
        release.wait()
        return 1.0

    try:
        assert score_safely(hangs, PROBLEM, "x", timeout=0.2).status == "timeout"
    finally:
        release.set()  # let the abandoned thread finish
    assert score_safely(lambda p, r: 1.0, PROBLEM, "x", timeout=5.0) == Score(1.0, "ok")
    assert score_safely(lambda p, r: 1 / 0, PROBLEM, "x", timeout=5.0).status == "crash"
