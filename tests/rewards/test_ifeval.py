import pytest

from rlvr.rewards import REWARDS, score_safely
from rlvr.rewards.ifeval import CHECKS
from rlvr.types import Problem

GOLDEN = [
    ("min_words", "one two three", {"n": 3}, True),
    ("min_words", "one two", {"n": 3}, False),
    ("max_words", "one, two; three!", {"n": 3}, True),
    ("max_words", "a b c d", {"n": 3}, False),
    ("include_keywords", "Paris is the capital", {"keywords": ["paris", "capital"]}, True),
    ("include_keywords", "Parisian food", {"keywords": ["Paris"]}, False),
    ("forbidden_words", "a fine answer", {"words": ["bad"]}, True),
    ("forbidden_words", "a BAD answer", {"words": ["bad"]}, False),
    ("json_format", '```json\n{"a": [1, 2]}\n```', {}, True),
    ("json_format", "{'a': 1}", {}, False),
    ("bullet_list", "intro\n* one\n- two\n*bold* not a bullet", {"n": 2}, True),
    ("bullet_list", "* one", {"n": 2}, False),
    ("lowercase", "all quiet 123", {}, True),
    ("lowercase", "not Quiet", {}, False),
    ("uppercase", "LOUD 123!", {}, True),
    ("uppercase", "LOUd", {}, False),
    ("no_commas", "no commas here", {}, True),
    ("no_commas", "one, two", {}, False),
    ("end_with", "Thanks. Any other questions?  \n", {"phrase": "Any other questions?"}, True),
    ("end_with", "Any other questions? Yes", {"phrase": "Any other questions?"}, False),
    ("paragraphs", "first\n\nsecond\n \nthird", {"n": 3}, True),
    ("paragraphs", "first\nstill first", {"n": 2}, False),
]


@pytest.mark.parametrize("check,response,kwargs,expected", GOLDEN)
def test_check_golden(check, response, kwargs, expected):
    assert CHECKS[check](response, **kwargs) is expected


def test_every_check_has_golden_cases_both_ways():
    covered = {(c, e) for c, _, _, e in GOLDEN}
    assert all((name, True) in covered and (name, False) in covered for name in CHECKS)


def test_reward_is_the_share_of_satisfied_constraints():
    problem = Problem("p", "Describe Paris in under 5 words, lowercase.", metadata={"constraints": [
        {"check": "max_words", "n": 5}, {"check": "lowercase"}, {"check": "include_keywords", "keywords": ["paris"]},
    ]})  # fmt: skip
    full = REWARDS["ifeval"](problem, "paris is lovely")
    assert full.value == 1.0 and full.status == "ok"
    partial = REWARDS["ifeval"](problem, "Paris is a lovely city indeed")
    assert abs(partial.value - 1 / 3) < 1e-9 and partial.status == "wrong"
    assert partial.info == {"0:max_words": 0.0, "1:lowercase": 0.0, "2:include_keywords": 1.0}


def test_bad_constraints_are_a_visible_crash_not_a_silent_zero():
    unknown = Problem("p", "x", metadata={"constraints": [{"check": "rhymes"}]})
    score = score_safely(REWARDS["ifeval"], unknown, "text")
    assert score.status == "crash" and "rhymes" in score.info["error"]
    assert score_safely(REWARDS["ifeval"], Problem("q", "x"), "text").status == "crash"
