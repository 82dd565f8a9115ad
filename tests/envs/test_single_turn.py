from functools import partial

from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.rewards import REWARDS, score_safely, weighted
from rlvr.rewards.base import as_reward_fn
from rlvr.types import Problem


def test_reward_and_correctness_are_separate():
    verifier = partial(score_safely, as_reward_fn(REWARDS["numeric"]))
    reward = weighted({"numeric": 1.0, "format": 0.5})
    env = SingleTurnEnv(reward, verifier)
    problem = Problem("p", "2+2=", answer="4")
    assert env.reset(problem) == [{"role": "user", "content": "2+2="}]
    right = env.step("2+2+0=4 #### 4")
    assert right.done and right.reward == 1.5 and right.info["correct"]
    assert right.info["components"] == {"numeric": 1.0, "format": 1.0}  # unweighted
    env.reset(problem)
    wrong_but_formatted = env.step("#### 5")
    assert wrong_but_formatted.reward == 0.5 and not wrong_but_formatted.info["correct"]


def test_crashing_reward_scores_wrong_with_status():
    def broken(problem, response):
        raise ZeroDivisionError("oops")

    env = SingleTurnEnv(partial(score_safely, broken), partial(score_safely, broken))
    env.reset(Problem("p", "x", answer="1"))
    result = env.step("1")
    assert result.reward == 0.0 and result.info["status"] == "crash" and not result.info["correct"]
