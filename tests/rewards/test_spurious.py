import threading

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.rewards import REWARDS
from rlvr.rewards.spurious import RandomReward
from rlvr.train.components import build_rewards
from rlvr.types import Problem

PROBLEM = Problem(id="p", prompt="?", answer="reward")


def scores(reward, replies):
    return [reward(PROBLEM, r).value for r in replies]


def test_rate_is_p_for_distinct_and_for_repeated_replies():
    reward = RandomReward(RandomReward.Params(p=0.3))
    n = 4000  # binomial sd of the mean: sqrt(0.3 * 0.7 / 4000) = 0.0072
    assert sum(scores(reward, [f"reply {i}" for i in range(n)])) / n == pytest.approx(0.3, abs=0.03)
    # One reply scored again and again still gets a fresh coin each time.
    assert sum(scores(reward, ["same"] * n)) / n == pytest.approx(0.3, abs=0.03)


def test_edge_probabilities():
    assert scores(RandomReward(RandomReward.Params(p=0.0)), ["a", "b", "a"]) == [0.0, 0.0, 0.0]
    assert scores(RandomReward(RandomReward.Params(p=1.0)), ["a", "b", "a"]) == [1.0, 1.0, 1.0]
    score = RandomReward(RandomReward.Params(p=1.0))(PROBLEM, "x")
    assert score.status == "ok"


def test_seeded_runs_reproduce_and_seeds_differ():
    replies = ["a", "b", "a", "c", "a", "b"] * 20
    first = scores(RandomReward(), replies)
    assert scores(RandomReward(), replies) == first
    assert scores(RandomReward(RandomReward.Params(seed=1)), replies) != first
    # The coin belongs to the problem too: the same replies to another problem score otherwise.
    other = Problem(id="q", prompt="?", answer="reward")
    assert [RandomReward()(other, r).value for r in replies] != first


def test_identical_replies_from_threads_get_the_same_coins_as_in_order():
    sequential = sorted(scores(RandomReward(), ["same"] * 64))
    reward, results, lock = RandomReward(), [], threading.Lock()

    def score_some():
        for _ in range(16):
            value = reward(PROBLEM, "same").value
            with lock:
                results.append(value)

    threads = [threading.Thread(target=score_some) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sequential


def test_configured_through_reward_params():
    assert REWARDS["random"] is RandomReward
    cfg = load_config(
        None,
        [
            "task.name=target_string",
            "task.rewards={random: 1.0}",
            "task.reward_params={random: {p: 0.25}}",
        ],
    )
    assert build_rewards(cfg, ["exact_reply"])["random"].params.p == 0.25
    bad = load_config(
        None,
        [
            "task.name=target_string",
            "task.rewards={random: 1.0}",
            "task.reward_params={random: {p: 1.5}}",
        ],
    )
    with pytest.raises(ConfigError, match=r"task\.reward_params\.random\.p"):
        build_rewards(bad, ["exact_reply"])
