import pytest

from rlvr.envs.nim import NimEnv, winning_take
from rlvr.types import Problem


def problem(stones):
    return Problem(id=f"nim-{stones}", prompt="Nim", metadata={"stones": stones})


@pytest.mark.parametrize("stones, take", [(5, 1), (6, 2), (7, 3), (8, None), (1, 1), (3, 3)])
def test_winning_take_leaves_a_multiple_of_four(stones, take):
    assert winning_take(stones) == take


def test_a_perfect_opponent_punishes_a_bad_move_and_rewards_are_per_turn():
    env = NimEnv(opponent_skill=1.0, good_move_reward=0.1)
    env.reset(problem(9))
    good = env.step("9 left, take 1")  # leaves 8, a lost position for the opponent
    assert good.reward == 0.1 and not good.done and good.observation.endswith(f"{env.stones} left")
    env.reset(problem(6))
    bad = env.step("take 1")  # leaves 5: the perfect opponent takes 1 and leaves us 4
    assert (bad.reward, bad.observation, env.stones) == (0.0, "I take 1, 4 left", 4)
    final = env.step("take 1")  # any move from 4 loses: the opponent takes the last 3
    assert final.done and final.reward == 0.0 and final.info["status"] == "wrong"


def test_taking_the_last_stone_wins_and_illegal_moves_cost_a_turn():
    env = NimEnv(opponent_skill=1.0)
    env.reset(problem(5))
    illegal = env.step("take 4")
    assert illegal.observation == "take 1 to 3 stones, 5 left" and env.stones == 5
    env.step("take 1")  # 4 left: the opponent has no winning move, takes some, we finish
    last = env.step(f"take {env.stones}")
    assert last.done and last.reward == 1.0 and last.info["correct"]


def test_the_opponent_is_seeded_by_the_problem():
    def play(env):
        env.reset(problem(19))
        return [env.step("take 1").observation for _ in range(3)]

    assert play(NimEnv(0.0)) == play(NimEnv(0.0))
