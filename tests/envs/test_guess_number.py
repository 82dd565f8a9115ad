from rlvr.envs.guess_number import GuessNumberEnv
from rlvr.types import Problem

PROBLEM = Problem(id="g", prompt="Guess my number from 1 to 16.", answer="11")


def play(env, replies):
    env.reset(PROBLEM)
    return [env.step(reply) for reply in replies]


def test_feedback_rewards_and_outcome_of_a_won_game():
    steps = play(GuessNumberEnv(16, 5, 0.1), ["range 1-16, guess 8", "guess 12", "guess 3", "11"])
    assert [s.observation for s in steps[:3]] == ["higher", "lower", "higher"]
    # 8 and 12 were inside the range the feedback allowed; 3 was below the known floor of 9
    assert [s.reward for s in steps] == [0.1, 0.1, 0.0, 1.0]
    assert [s.done for s in steps] == [False, False, False, True]
    assert steps[-1].info == {"guesses": 4, "correct": True, "status": "ok"}


def test_out_of_guesses_is_a_loss_and_a_reply_without_number_is_a_turn():
    steps = play(GuessNumberEnv(16, 3, 0.1), ["no idea", "5", "6"])
    assert steps[0].observation == "say a number from 1 to 16" and steps[0].reward == 0.0
    assert steps[-1].done and steps[-1].reward == 0.0
    assert steps[-1].info["status"] == "wrong" and not steps[-1].info["correct"]


def test_reset_starts_a_new_game():
    env = GuessNumberEnv(16, 5)
    play(env, ["8", "12"])
    assert env.reset(PROBLEM) == [{"role": "user", "content": PROBLEM.prompt}]
    assert (env.low, env.high, env.guesses) == (1, 16, 0)
