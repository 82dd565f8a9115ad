import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.rewards import REWARDS
from rlvr.tasks import TASKS
from rlvr.tasks.reasoning_gym import INSTRUCTION, ReasoningGymParams, ReasoningGymTask
from rlvr.train.components import build_task

# One or two animals, a few of each: short prompts (the tiny model has 512 positions).
LEGS = {"min_animals": 1, "max_animals": 2, "max_instances": 5}


def task(dataset="leg_counting", config=LEGS, seed=0, eval_size=20, size=200):
    params = ReasoningGymParams(dataset=dataset, config=config, size=size)
    return ReasoningGymTask(params, seed=seed, eval_size=eval_size)


def verify(problem, reply):
    return REWARDS[ReasoningGymTask.verifier](problem, reply)


def question(problem):
    return problem.metadata["entry"]["question"]


def test_problems_carry_the_entry_and_ask_for_answer_tags():
    t = task()
    problem = t.train_problem(0)
    entry = problem.metadata["entry"]
    assert problem.prompt == f"{entry['question'].strip()}\n\n{INSTRUCTION}"
    assert problem.answer == entry["answer"] and problem.domain == "leg_counting"
    assert json.loads(json.dumps(problem.metadata))["entry"]["question"] == entry["question"]
    assert TASKS["reasoning_gym"] is ReasoningGymTask and t.verifier in REWARDS


def test_train_and_eval_are_disjoint_and_deterministic():
    t, same, other = task(), task(), task(seed=1)
    evals = t.eval_problems()
    assert len(evals) == 20 and len({question(p) for p in evals}) == 20
    assert [p.id for p in same.eval_problems()] == [p.id for p in evals]
    assert {question(p) for p in other.eval_problems()} != {question(p) for p in evals}
    train = [t.train_problem(i) for i in range(300)]
    assert not {question(p) for p in train} & {question(p) for p in evals}
    assert [same.train_problem(i) for i in range(300)] == train
    assert [other.train_problem(i).prompt for i in range(20)] != [p.prompt for p in train[:20]]
    assert t.train_problem(250) == train[50]  # the train pool cycles after task.size entries
    assert t.train_problem(10**9).prompt  # warm start draws indices up to 10**9


def test_small_settings_keep_eval_questions_out_of_train():
    # One animal, one of it: only as many distinct questions as there are animals (37).
    one = {"min_animals": 1, "max_animals": 1, "max_instances": 1}
    t = task(config=one, eval_size=30, size=50)
    evals = {question(p) for p in t.eval_problems()}
    train = {question(t.train_problem(i)) for i in range(100)}
    assert len(evals) == 30 and train and not train & evals
    with pytest.raises(ValueError, match=r"only \d+ distinct questions.*lower task.eval_size"):
        task(config=one, eval_size=40)


@pytest.mark.parametrize(
    "dataset, config", [("leg_counting", LEGS), ("chain_sum", {}), ("spell_backward", {})]
)
def test_demonstrations_score_one_and_flawed_ones_less(dataset, config):
    t = task(dataset, config, eval_size=5)
    for problem in t.eval_problems() + [t.train_problem(i) for i in range(5)]:
        good, bad = t.demonstration(problem), t.demonstration(problem, flawed=True)
        assert good == f"<answer>{problem.answer}</answer>"
        assert (verify(problem, good).value, verify(problem, good).status) == (1.0, "ok")
        assert verify(problem, bad).value < 1 and bad != "<answer></answer>"
        assert t.demonstration(problem, flawed=True) == bad


def test_flawed_number_answers_are_near_misses():
    t = task(eval_size=10)
    for problem in t.eval_problems():
        wrong = t.demonstration(problem, flawed=True).removeprefix("<answer>")
        assert 1 <= abs(int(wrong.removesuffix("</answer>")) - int(problem.answer)) <= 2


def test_dataset_without_answers_cannot_warm_start():
    t = task("rush_hour", {}, eval_size=2, size=10)
    problem = t.eval_problems()[0]
    assert problem.answer is None
    with pytest.raises(ValueError, match="no reference answers"):
        t.demonstration(problem)


@pytest.mark.parametrize(
    "dataset, config, message",
    [
        ("leg_count", {}, r"no dataset 'leg_count'\. Did you mean 'leg_counting'.*List them all"),
        (
            "leg_counting",
            {"max_animal": 3},
            r"no setting 'max_animal'\. Did you mean 'max_animals'",
        ),
        ("leg_counting", {"seed": 3}, r"task.config must not set 'seed'"),
        ("leg_counting", {"size": 3}, r"task.config must not set 'size'"),
    ],
)
def test_bad_dataset_or_config_names_the_fix(dataset, config, message):
    with pytest.raises(ValueError, match=message):
        task(dataset, config)


def test_composite_config_mixes_datasets():
    specs = [{"name": "leg_counting", "config": LEGS}, {"name": "chain_sum", "weight": 2}]
    t = task("composite", {"datasets": specs}, eval_size=10)
    problems = t.eval_problems()
    assert {p.domain for p in problems} == {"leg_counting", "chain_sum"}
    assert all(verify(p, t.demonstration(p)).value == 1.0 for p in problems)


def test_builds_from_config_overrides():
    base = ["task.name=reasoning_gym", "task.eval_size=5", "task.size=100"]
    config = "task.config={min_animals: 1, max_animals: 2}"
    t = build_task(load_config(None, base + ["task.dataset=leg_counting", config]))
    assert isinstance(t, ReasoningGymTask) and len(t.eval_problems()) == 5
    assert t.params.config == {"min_animals": 1, "max_animals": 2}
    with pytest.raises(ConfigError, match=r"max_animals must be >= min_animals"):
        build_task(
            load_config(None, base + ["task.dataset=leg_counting", "task.config={max_animals: 2}"])
        )
    with pytest.raises(ConfigError, match=r"task 'reasoning_gym': .*Did you mean 'leg_counting'"):
        build_task(load_config(None, base + ["task.dataset=leg_countin"]))
    with pytest.raises(ConfigError, match=r"task\.dataset"):
        build_task(load_config(None, base))
