import pytest
import reasoning_gym

from rlvr.rewards import REWARDS, score_safely
from rlvr.rewards.reasoning_gym import open_dataset, reasoning_gym_score, response_answer
from rlvr.types import Problem


def entry_problem(name, config=None, index=0):
    """A problem around a reasoning-gym entry, and the dataset that made it (the scorer's truth)."""
    dataset = reasoning_gym.create_dataset(name, seed=1, size=10, **(config or {}))
    entry = dataset[index]
    problem = Problem(
        id=f"{name}-{index}",
        prompt=entry["question"],
        answer=entry["answer"],
        metadata={"dataset": name, "config": config or {}, "entry": entry},
    )
    return problem, dataset


def test_registered_as_the_task_verifier():
    assert REWARDS["reasoning_gym"] is reasoning_gym_score


@pytest.mark.parametrize("name", ["leg_counting", "chain_sum", "spell_backward"])
def test_correct_answer_in_tags_scores_one(name):
    problem, _ = entry_problem(name)
    score = reasoning_gym_score(problem, f"Let me think.\n<answer> {problem.answer} </answer>")
    assert (score.value, score.status) == (1.0, "ok")


@pytest.mark.parametrize("wrong", ["{}1", "-{}", "x"])
def test_wrong_answer_gets_what_the_dataset_scorer_gives(wrong):
    problem, dataset = entry_problem("chain_sum")
    reply = f"<answer>{wrong.format(problem.answer)}</answer>"
    score = reasoning_gym_score(problem, reply)
    assert score.value == dataset.score_answer(response_answer(reply), problem.metadata["entry"])
    assert score.value < 1 and score.status == "wrong"


def test_partial_credit_is_kept_and_is_not_ok():
    # leg_counting uses reasoning-gym's default scorer: len(answer) / len(reply) when it contains it.
    problem, dataset = entry_problem("leg_counting")
    reply = f"<answer>{problem.answer} legs</answer>"
    expected = dataset.score_answer(f"{problem.answer} legs", problem.metadata["entry"])
    score = reasoning_gym_score(problem, reply)
    assert 0 < expected < 1
    assert (score.value, score.status) == (pytest.approx(expected), "wrong")


def test_no_answer_is_zero_even_where_the_scorer_gives_a_floor():
    problem, dataset = entry_problem("fraction_simplification")
    assert dataset.score_answer(None, problem.metadata["entry"]) > 0
    for reply in ["I am not sure.", "<answer></answer>", ""]:
        score = reasoning_gym_score(problem, reply)
        assert (score.value, score.status) == (0.0, "wrong")


def test_last_tag_wins_and_other_markers_are_a_fallback():
    problem, _ = entry_problem("leg_counting")
    right, wrong = problem.answer, str(int(problem.answer) + 1)
    assert (
        reasoning_gym_score(problem, f"<answer>{wrong}</answer> <answer>{right}</answer>").value
        == 1
    )
    assert (
        reasoning_gym_score(problem, f"<answer>{right}</answer> <answer>{wrong}</answer>").value < 1
    )
    assert reasoning_gym_score(problem, f"#### {right}").value == 1
    assert reasoning_gym_score(problem, rf"so \boxed{{{right}}}").value == 1
    assert (
        reasoning_gym_score(problem, f"There are {right}").value == 0
    )  # a bare number is no answer


def test_scores_with_the_tasks_config_not_the_dataset_defaults():
    # decimal_arithmetic's tolerance is one unit in its last decimal place, which config sets.
    config = {"min_num_decimal_places": 1, "max_num_decimal_places": 1}
    problem, dataset = entry_problem("decimal_arithmetic", config)
    near = str(float(problem.answer) + 0.05)
    default_scorer = reasoning_gym.get_score_answer_fn("decimal_arithmetic")
    assert default_scorer(near, problem.metadata["entry"]) == 0.0
    assert dataset.score_answer(near, problem.metadata["entry"]) == 1.0
    assert reasoning_gym_score(problem, f"<answer>{near}</answer>").value == 1.0


def test_multiline_answer_scores_one():
    problem, _ = entry_problem("binary_matrix")
    assert "\n" in problem.answer
    assert reasoning_gym_score(problem, f"<answer>\n{problem.answer}\n</answer>").value == 1.0


def test_problem_without_an_entry_is_a_crash_that_says_why():
    score = score_safely(reasoning_gym_score, Problem(id="p", prompt="1+1", answer="2"), "2")
    assert score.status == "crash" and "no reasoning-gym entry" in score.info["error"]


def test_open_dataset_names_the_fix():
    with pytest.raises(ValueError, match=r"no dataset 'leg_count'.*'leg_counting'.*List them all"):
        open_dataset("leg_count", {})
    with pytest.raises(ValueError, match=r"no setting 'max_animal'.*'max_animals'.*min_instances"):
        open_dataset("leg_counting", {"max_animal": 3})
    with pytest.raises(ValueError, match=r"rejected config.*max_animals must be >= min_animals"):
        open_dataset("leg_counting", {"min_animals": 5, "max_animals": 2})
