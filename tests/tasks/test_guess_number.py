import statistics

from rlvr.models.tiny import build_tokenizer
from rlvr.tasks.guess_number import GuessNumberParams, GuessNumberTask
from rlvr.train.warmstart import sft_example


def replay(task, problem, flawed):
    env = task.make_env()
    env.reset(problem)
    replies = [
        m["content"] for m in task.demonstration(problem, flawed) if m["role"] == "assistant"
    ]
    for reply in replies:
        result = env.step(reply)
    return result, len(replies)


def test_binary_search_demonstrations_always_win_and_the_linear_scan_often_loses():
    task = GuessNumberTask(GuessNumberParams(), seed=0, eval_size=16)
    won, turns = {}, {}
    for flawed in (False, True):
        games = [replay(task, task.train_problem(i), flawed) for i in range(100)]
        won[flawed] = sum(r.info["correct"] for r, _ in games) / 100
        turns[flawed] = statistics.mean(n for _, n in games)
    assert won[False] == 1.0 and turns[False] <= 5
    assert won[True] < 0.65  # a scan from the bottom finds 1..8 only
    assert turns[True] > turns[False]


def test_eval_covers_every_secret_and_demonstration_feedback_matches_the_env():
    task = GuessNumberTask(GuessNumberParams(max_number=8), seed=0, eval_size=8)
    assert sorted(int(p.answer) for p in task.eval_problems()) == list(range(1, 9))
    problem = task.eval_problems()[6]  # secret 7
    env = task.make_env()
    env.reset(problem)
    demo = task.demonstration(problem)
    for reply, feedback in zip(demo[::2], demo[1::2]):
        assert env.step(reply["content"]).observation == feedback["content"]


def test_warm_start_trains_on_every_reply_and_no_feedback():
    tokenizer = build_tokenizer()
    task = GuessNumberTask(GuessNumberParams(), seed=0, eval_size=4)
    ids, mask = sft_example(tokenizer, task, index=3, flawed=True)
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    replies = [m["content"] for m in task.demonstration(task.train_problem(3), flawed=True)]
    assert trained == "".join(r + "<|end|>" for r in replies if r not in ("higher", "lower"))
    assert "higher" not in trained and "lower" not in trained
