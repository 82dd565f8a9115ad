from rlvr.tasks.nim import NimParams, NimTask


def outcome(task, problem, flawed):
    env = task.make_env()
    env.reset(problem)
    for message in task.demonstration(problem, flawed):
        if message["role"] == "assistant":
            result = env.step(message["content"])
    return result.info["correct"]


def test_the_winning_strategy_always_wins_and_taking_one_mostly_loses():
    task = NimTask(NimParams(), seed=0, eval_size=8)
    problems = [task.train_problem(i) for i in range(100)]
    assert all(outcome(task, p, flawed=False) for p in problems)
    assert sum(outcome(task, p, flawed=True) for p in problems) < 50
    assert all(p.metadata["stones"] % 4 for p in problems + task.eval_problems())
