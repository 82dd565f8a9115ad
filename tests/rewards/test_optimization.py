"""MiniOpt's OptReward: every branch of its three terms on hand-written replies, and whole
replies scored with their programs run in the sandbox."""

from __future__ import annotations

import pytest

from rlvr.rewards.optimization import (
    OptReward,
    answer_code,
    answer_term,
    elements_term,
    format_term,
    printed_objective,
    well_formed,
)
from rlvr.rewards.sandbox import Limits, SandboxUnavailableError
from rlvr.types import Problem

FIVE = "Sets: x\nParameters: 3\nVariables: x\nObjective: max 3x\nConstraints: x<=4"


def reply(thinking: str = FIVE, code: str = "print(12)") -> str:
    return f"<think>{thinking}</think><answer>```python\n{code}\n```</answer>"


@pytest.mark.parametrize(
    ("response", "formed"),
    [
        (reply(), True),
        ("<think>t</think>\n<answer>print(1)</answer>", True),
        ("<think>t</think>", False),  # no answer
        ("<answer>print(1)</answer><think>t</think>", False),  # answer before thinking
        ("<think>a</think><think>b</think><answer>c</answer>", False),  # a tag twice
        ("<think>t<answer></think>c</answer>", False),  # answer opened inside thinking
        ("print(12)", False),
    ],
)
def test_format_needs_each_tag_once_in_order(response, formed):
    assert well_formed(response) is formed
    assert format_term(response) == (1.0 if formed else -1.0)


@pytest.mark.parametrize(
    ("thinking", "term"),
    [
        (FIVE, 1.0),
        ("Sets: x\nObjective: max x", 0.4),
        ("Variables only", 0.2),
        ("no element named here", -1.0),
        ("sets and objective, lower case", -1.0),  # the names are matched as written
    ],
)
def test_elements_count_the_names_in_the_thinking(thinking, term):
    assert elements_term(reply(thinking)) == pytest.approx(term)


def test_elements_outside_the_thinking_or_in_a_malformed_reply_do_not_count():
    assert elements_term(reply("none", code="# Sets Parameters\nprint(1)")) == -1.0
    assert elements_term(FIVE) == -1.0


def test_the_program_comes_from_the_answer_span_only():
    assert answer_code(reply(code="print(7)")) == "print(7)\n"
    assert answer_code("<think>```python\nprint(1)\n```</think><answer>print(2)</answer>") == (
        "print(2)"
    )
    assert answer_code("```python\nprint(1)\n```") is None


@pytest.mark.parametrize(
    ("stdout", "objective"),
    [
        ("x = 3, y = 2\nObjective: 12.0\n", 12.0),
        ("12", 12.0),
        ("-7.25", -7.25),
        ("1.5e+02", 150.0),
        ("2e3", 2000.0),
        ("objective 12 at x=3 y=2", 2.0),  # the last number, as the prompt's contract says
        ("infeasible", None),
        ("", None),
    ],
)
def test_the_objective_is_the_last_number_printed(stdout, objective):
    assert printed_objective(stdout) == objective


@pytest.mark.parametrize(
    ("objective", "stderr", "term"),
    [
        (12.0, "", 2.0),
        (12.04, "", 2.0),  # rounds to 12.0
        (11.96, "", 2.0),
        (12.06, "", -1.5),  # rounds to 12.1
        (11.0, "", -1.5),
        (12.0, "Traceback (most recent call last): ...", -1.5),  # right value, but it failed
        (12.0, "  \n", 2.0),  # blank stderr is empty
        (None, "", -2.0),
    ],
)
def test_answer_term_branches(objective, stderr, term):
    assert answer_term(objective, stderr, gold=12.0) == term


# ---------------------------------------------------------------------------------------------
# OptReward with the programs run in the sandbox

PROBLEM = Problem(id="lp", prompt="Maximize 3x+2y subject to x+y<=4, 2x+y<=6", answer="10")
RIGHT = "print(max(3*x+2*y for x in range(7) for y in range(7) if x+y<=4 and 2*x+y<=6))"


@pytest.fixture(scope="module")
def reward(skip_without_namespaces):
    try:
        opt = OptReward(OptReward.Params(limits=Limits(wall_seconds=2, cpu_seconds=1)))
    except SandboxUnavailableError as e:
        skip_without_namespaces(e)
    yield opt
    opt.sandbox.close()


@pytest.mark.parametrize(
    ("response", "value", "status", "answer"),
    [
        (reply(code=RIGHT), 4.0, "ok", 2.0),
        # The last constraint dropped: max 3x+2y with x+y<=4 is 12, not 10.
        (reply(code=RIGHT.replace(" and 2*x+y<=6", "")), 0.5, "wrong", -1.5),
        (reply("Objective: max 3x+2y", RIGHT), 3.2, "ok", 2.0),
        (reply(code="print(10)\nraise SystemExit('solver failed')"), 0.5, "wrong", -1.5),
        (reply(code="x = 1 +"), 0.0, "wrong", -2.0),  # a syntax error prints nothing
        (reply(code="print(*range(20))"), 0.5, "wrong", -1.5),  # printing many numbers
        (RIGHT, -4.0, "wrong", -2.0),  # the program alone, without the format
    ],
    ids=["right", "constraint-dropped", "one-element", "stderr", "no-output", "many", "no-tags"],
)
def test_opt_reward_sums_the_three_terms(reward, response, value, status, answer):
    score = reward(PROBLEM, response)
    assert score.value == pytest.approx(value)
    assert score.status == status
    assert score.info["answer"] == answer
    assert score.value == pytest.approx(
        sum(score.info[t] for t in ("format", "elements", "answer"))
    )


def test_opt_reward_reports_a_program_that_runs_past_its_limit(reward):
    hung = reward(PROBLEM, reply(code="while True: pass"))
    assert (hung.status, hung.info["answer"]) == ("timeout", -2.0)


def test_opt_reward_names_a_problem_without_a_numeric_answer(reward):
    with pytest.raises(ValueError, match="optimal objective as problem.answer"):
        reward(Problem(id="p", prompt="?", answer="unknown"), reply(code=RIGHT))
