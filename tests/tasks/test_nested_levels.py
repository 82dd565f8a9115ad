from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.tasks.nested_levels import NestedLevelsParams, NestedLevelsTask, level_weights
from rlvr.train.components import build_components

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nested_levels.toml"


def task(**params):
    return NestedLevelsTask(NestedLevelsParams(**params), seed=0, eval_size=8)


def test_level_weights_follow_the_power_law_and_sum_to_one():
    weights = level_weights(3, 2.0)  # 1, 1/4, 1/9 over 49/36
    assert weights == pytest.approx([36 / 49, 9 / 49, 4 / 49])
    assert level_weights(4, 0.0) == pytest.approx([0.25] * 4)


def test_a_level_counts_only_inside_the_cell_of_the_levels_before_it():
    t = task(levels=3, bits_per_level=2, weight_exponent=1.0)
    problem = t.train_problem(0)
    first, second, third = problem.answer.split()
    c1, c2, c3 = level_weights(3, 1.0)
    flip = {"0": "1", "1": "0"}
    wrong = {block: flip[block[0]] + block[1] for block in (first, second, third)}
    env = t.make_env()

    def play(reply):
        env.reset(problem)
        return env.step(reply)

    assert play(f"{first} {second} {third}").reward == pytest.approx(1.0)
    assert play(f"{first} {second} {third}").info["correct"]
    assert play(f"{first} {second} {wrong[third]}").reward == pytest.approx(c1 + c2)
    # the third block is right, but outside level 2's cell it is not seen
    outside = play(f"{first} {wrong[second]} {third}")
    assert outside.reward == pytest.approx(c1) and not outside.info["correct"]
    assert outside.info["components"] == {"level1": 1.0, "level2": 0.0, "level3": 0.0}
    assert play(f"{wrong[first]} {second} {third}").reward == 0.0
    assert play(f"{first}").reward == pytest.approx(c1)  # a short reply solves what it has


def test_keys_fix_the_strings_and_eval_covers_every_key():
    t = task(keys=3, levels=4, bits_per_level=3)
    evals = t.eval_problems()
    assert [p.prompt for p in evals[:4]] == [
        "Key 0: 4 blocks of 3 bits.",
        "Key 1: 4 blocks of 3 bits.",
        "Key 2: 4 blocks of 3 bits.",
        "Key 0: 4 blocks of 3 bits.",
    ]
    assert evals[0].answer == evals[3].answer != evals[1].answer
    assert all(len(b) == 3 and set(b) <= {"0", "1"} for b in evals[0].answer.split())
    by_key = {p.prompt: p.answer for p in map(t.train_problem, range(50))}
    assert by_key == {p.prompt: p.answer for p in evals}


def test_demonstrations_are_uniform_strings_in_the_reply_format():
    t = task(levels=4, bits_per_level=2)
    problems = [t.train_problem(i) for i in range(400)]
    demos = [t.demonstration(p) for p in problems]
    assert all(len(d.split()) == 4 and all(len(b) == 2 for b in d.split()) for d in demos)
    first_solved = sum(d.split()[0] == p.answer.split()[0] for d, p in zip(demos, problems))
    assert 60 < first_solved < 140  # about 1 in 4, as the reference's chance of level 1


def test_the_task_scores_itself_and_refuses_task_rewards():
    cfg = load_config(EXAMPLE)
    assert build_components(cfg).reward is None  # the task's env holds the gated reward
    with pytest.raises(ConfigError, match="task.rewards does not apply"):
        build_components(load_config(EXAMPLE, ["task.rewards={exact: 1}"]))
    with pytest.raises(ConfigError, match="task.levels"):
        build_components(load_config(EXAMPLE, ["task.levels=0"]))
