"""Process credit against a worked reference solution: the share of its steps a reply reproduces,
in order, before its first departure (a dense signal for long procedures with one right route)."""

from __future__ import annotations

from rlvr.types import Problem, Score


def solution_prefix(problem: Problem, response: str) -> Score:
    """Share of the worked solution's steps the reply repeats before its first departure.

    Steps are the whitespace-separated words of metadata['solution']; the credit is the
    matched leading steps over all its steps, in [0, 1], ok only for the whole solution. A slip
    late in a 40-step scratchpad earns more than one in its first step, where an outcome reward
    scores both 0. It pays for following the reference's route, so use it beside the
    verifier and only where the task has one procedure (scratchpad arithmetic), not free-form
    reasoning that may reach the answer another way."""
    solution = problem.metadata.get("solution")
    if not solution:
        raise ValueError(
            f"problem {problem.id} has no worked solution (metadata['solution']); solution_prefix "
            "needs one: the arithmetic task provides it, a jsonl task with task.solution_field"
        )
    steps, replied = solution.split(), response.split()
    matched = 0
    for step, reply_step in zip(steps, replied, strict=False):
        if step != reply_step:
            break
        matched += 1
    whole = matched == len(steps) == len(replied)
    return Score(matched / len(steps), "ok" if whole else "wrong", {"matched_steps": matched})
