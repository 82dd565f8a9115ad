"""MiniOpt's OptReward: a reply that models an optimisation problem in five named elements
inside <think>, then answers with code the sandbox runs; the last number it prints is the objective."""

from __future__ import annotations

import re

from rlvr.rewards.code import extract_code
from rlvr.rewards.sandbox import Execution, SandboxSettings
from rlvr.types import Problem, Score

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
ELEMENTS = ("Sets", "Parameters", "Variables", "Objective", "Constraints")
_NUMBER = re.compile(r"-?\d+\.\d+e[+-]?\d+|-?\d+\.\d+|-?\d+e[+-]?\d+|-?\d+")


def well_formed(response: str) -> bool:
    """Each of <think> </think> <answer> </answer> exactly once, in that order."""
    if any(response.count(tag) != 1 for tag in TAGS):
        return False
    positions = [response.index(tag) for tag in TAGS]
    return positions == sorted(positions)


def format_term(response: str) -> float:
    return 1.0 if well_formed(response) else -1.0


def elements_term(response: str) -> float:
    """+0.2 for each of the five element names in the thinking; -1 when none is, or when the
    reply is not well formed."""
    if not well_formed(response):
        return -1.0
    thinking = response[response.index("<think>") : response.index("</think>")]
    found = sum(name in thinking for name in ELEMENTS)
    return 0.2 * found if found else -1.0


def answer_code(response: str) -> str | None:
    """The program in the <answer> span (its last fenced block, or the whole span unfenced)."""
    if not well_formed(response):
        return None
    opened, closed = TAGS[2], TAGS[3]
    return extract_code(response[response.index(opened) + len(opened) : response.index(closed)])


def printed_objective(stdout: str) -> float | None:
    """The last number the program printed: the prompt's contract is that it prints the
    objective last (the released reward accepts any printed number, which printing many games)."""
    numbers = _NUMBER.findall(stdout)
    return float(numbers[-1]) if numbers else None


def answer_term(objective: float | None, stderr: str, gold: float) -> float:
    """+2 when the objective matches the gold to 0.1 with nothing on stderr, -1.5 when a value
    was printed but is wrong, -2 when nothing was."""
    if objective is None:
        return -2.0
    return 2.0 if round(objective, 1) == round(gold, 1) and not stderr.strip() else -1.5


class OptReward:
    """MiniOpt's OptReward (arXiv 2606.25832): format, five-element and answer terms, summed.

    Format +1 / -1, five elements +0.2 each (-1 for none), answer +2 right, -1.5 wrong, -2 no
    value or bad format: from -4 to 4. The program runs in the sandbox; its objective is
    compared with `problem.answer`. Correct (status ok) exactly when the answer term is +2."""

    Params = SandboxSettings

    def __init__(self, params: Params | None = None):
        self.params = params or self.Params()
        self.sandbox = self.params.open("miniopt")

    def __call__(self, problem: Problem, response: str) -> Score:
        try:
            gold = float(problem.answer)
        except (TypeError, ValueError):
            raise ValueError(
                f"problem {problem.id}: the miniopt reward needs the optimal objective as "
                f"problem.answer, a number; got {problem.answer!r}"
            ) from None
        code = answer_code(response)
        execution = self.sandbox.run_python(code) if code else Execution(None)
        if execution.error:
            return Score(0.0, "infra_error", {"error": execution.error})
        objective = printed_objective(execution.stdout)
        terms = {
            "format": format_term(response),
            "elements": elements_term(response),
            "answer": answer_term(objective, execution.stderr, gold),
        }
        status = "ok" if terms["answer"] == 2.0 else "timeout" if execution.timed_out else "wrong"
        return Score(sum(terms.values()), status, terms)
