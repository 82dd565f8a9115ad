import random
from functools import cache

import pytest
from rapidfuzz.distance import Levenshtein

from rlvr.rewards import REWARDS
from rlvr.rewards.edit_distance import exact_reply, levenshtein
from rlvr.types import Problem

PROBLEM = Problem(id="p", prompt="?", answer="reward")


def recursive_distance(a: str, b: str) -> int:
    """The textbook recursion, for cross-checking the library's distance."""

    @cache
    def d(i: int, j: int) -> int:
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


@pytest.mark.parametrize(
    "a, b, distance",
    [
        ("kitten", "sitting", 3),  # two substitutions and an insertion
        ("", "abc", 3),
        ("abc", "", 3),
        ("abc", "abc", 0),
        ("flaw", "lawn", 2),  # delete f, append n
        ("intention", "execution", 5),
        ("ab", "ba", 2),  # no transpositions in plain Levenshtein
    ],
)
def test_known_distances(a, b, distance):
    assert levenshtein(Problem(id="p", prompt="?", answer=b), a).info["distance"] == distance
    assert levenshtein(Problem(id="p", prompt="?", answer=a), b).info["distance"] == distance


def test_matches_the_recursion_on_random_strings():
    rng = random.Random(0)
    for _ in range(300):
        a = "".join(rng.choice("abc") for _ in range(rng.randint(0, 7)))
        b = "".join(rng.choice("abc") for _ in range(rng.randint(0, 7)))
        assert Levenshtein.distance(a, b) == recursive_distance(a, b), (a, b)


@pytest.mark.parametrize(
    "reply, value, status",
    [
        ("reward", 1.0, "ok"),
        ("reward\n", 1 - 1 / 7, "wrong"),  # whitespace is part of the reply
        ("rewa", 1 - 2 / 6, "wrong"),  # two deletions, over the longer length 6
        ("rewardxx", 1 - 2 / 8, "wrong"),  # the longer reply sets the scale
        ("reword", 1 - 1 / 6, "wrong"),
        ("zzzzzz", 0.0, "wrong"),
        ("", 0.0, "wrong"),
    ],
)
def test_levenshtein_reward(reply, value, status):
    score = levenshtein(PROBLEM, reply)
    assert score.value == pytest.approx(value)
    assert score.status == status
    assert score.info["distance"] == recursive_distance(reply, "reward")


def test_exact_reply_compares_the_whole_reply():
    assert exact_reply(PROBLEM, "reward").value == 1.0
    assert exact_reply(PROBLEM, "reward\n").value == 0.0  # padded variants are other replies
    assert exact_reply(PROBLEM, " reward").value == 0.0
    assert exact_reply(PROBLEM, "Reward").status == "wrong"
    assert exact_reply(PROBLEM, "reward reward").value == 0.0
    assert exact_reply(PROBLEM, "#### reward").value == 0.0  # no answer marker is read


def test_registered():
    assert REWARDS["levenshtein"] is levenshtein
    assert REWARDS["exact_reply"] is exact_reply


def test_also_correct_strings_are_accepted_and_the_dense_credit_takes_the_nearest():
    problem = Problem(id="p", prompt="?", answer="reward", metadata={"also_correct": ["prize"]})
    assert (
        exact_reply(problem, "prize").status == "ok" and exact_reply(problem, "reward").value == 1
    )
    assert exact_reply(problem, "prizes").value == 0.0
    # "prizes" is 1 edit from "prize" (credit 1 - 1/6) and 5 from "reward".
    score = levenshtein(problem, "prizes")
    assert score.info["distance"] == 1 and score.value == pytest.approx(5 / 6)
    assert score.status == "wrong" and levenshtein(problem, "prize").status == "ok"
