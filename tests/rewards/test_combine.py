import pytest

from rlvr.rewards import REWARDS, weighted
from rlvr.types import Problem, Score

PROBLEM = Problem(id="p", prompt="347+285=", answer="632")


def test_weighted_sum_and_per_component_info():
    reward = weighted({"numeric": 1.0, "format": 0.1})
    assert reward(PROBLEM, "#### 632") == Score(1.1, "ok", {"numeric": 1.0, "format": 1.0})
    assert reward(PROBLEM, "#### 631") == Score(0.1, "ok", {"numeric": 0.0, "format": 1.0})
    assert reward(PROBLEM, "631") == Score(0.0, "wrong", {"numeric": 0.0, "format": 0.0})


def test_a_components_own_numbers_are_forwarded_under_its_name():
    registry = {
        "code": lambda p, r: Score(0.5, "wrong", {"passed": 1, "total": 2, "reason": "x"}),
        "flag": lambda p, r: Score(1.0, "ok", {"cached": True}),
    }
    info = weighted({"code": 1.0, "flag": 1.0}, registry)(PROBLEM, "").info
    assert info == {"code": 0.5, "flag": 1.0, "code/passed": 1.0, "code/total": 2.0}


def test_worst_status_wins_and_errors_are_kept():
    def raises(problem, response):
        raise RuntimeError("boom")

    registry = {
        "good": lambda p, r: Score(1.0),
        "slow": lambda p, r: Score(0.0, "timeout"),
        "broken": raises,
        "down": lambda p, r: Score(0.0, "infra_error"),
    }
    score = weighted({"good": 2.0, "slow": 1.0, "broken": 1.0}, registry)(PROBLEM, "")
    assert (score.value, score.status) == (2.0, "crash")
    assert score.info["error"] == "broken: RuntimeError: boom"
    assert weighted({"slow": 1.0, "down": 1.0}, registry)(PROBLEM, "").status == "infra_error"
    assert weighted({"good": 1.0, "slow": 1.0}, registry)(PROBLEM, "").status == "timeout"


def test_unknown_component_suggests_the_close_name():
    with pytest.raises(KeyError, match="Did you mean 'numeric'"):
        weighted({"numerc": 1.0})


def test_every_registered_reward_has_a_one_sentence_summary():
    # `rlvr list rewards` shows the first docstring line, so it must be a whole sentence.
    for fn in REWARDS.values():
        assert fn.__doc__ and fn.__doc__.strip().splitlines()[0].endswith(".")


def test_gated_components_count_only_after_earlier_ones_pass():
    from rlvr.rewards import gated

    calls = []

    def spy(problem, response):
        calls.append(response)
        return Score(0.5, "ok")

    reward = gated({"format": 0.1, "numeric": 1.0, "spy": 0.2}, registry={**REWARDS, "spy": spy})
    problem = Problem("p", "2+2=", answer="4")
    right = reward(problem, "work #### 4")
    assert abs(right.value - (0.1 + 1.0 + 0.1)) < 1e-9 and right.status == "ok"
    assert right.info == {"format": 1.0, "numeric": 1.0, "spy": 0.5}
    wrong = reward(problem, "work #### 5")  # format passes, correctness fails: spy is gated off
    assert abs(wrong.value - 0.1) < 1e-9 and wrong.info == {
        "format": 1.0,
        "numeric": 0.0,
        "spy": 0.0,
    }
    unformatted = reward(problem, "4")  # the first gate closes everything after it
    assert unformatted.value == 0.0 and unformatted.status == "wrong"
    assert calls == ["work #### 4"]  # gated-off components never run


def test_a_crashing_gate_closes_the_levels_after_it_and_reports_the_crash():
    from rlvr.rewards import gated

    def raises(problem, response):
        raise RuntimeError("boom")

    calls = []
    registry = {
        "level1": lambda p, r: Score(1.0, "ok"),
        "level2": raises,
        "level3": lambda p, r: calls.append(r) or Score(1.0, "ok"),
    }
    score = gated({"level1": 0.5, "level2": 0.3, "level3": 0.2}, registry)(PROBLEM, "y")
    assert (score.value, score.status) == (0.5, "crash")
    assert score.info["error"] == "level2: RuntimeError: boom" and calls == []
