"""task.paraphrase: the same problems and answers, each prompt reworded by its task, so one
Co-RL cohort member reads the problems in other words than its peer (a diversity knob)."""

from __future__ import annotations

from dataclasses import replace

from rlvr.tasks.base import seeded_rng
from rlvr.types import Problem


def reworded(problem: Problem, wordings: tuple[str, ...], **values) -> Problem:
    """`problem` with its prompt one of `wordings` filled in with `values`; the wording is
    drawn from the problem's id, so a problem always reads the same."""
    wording = seeded_rng("paraphrase", problem.id).choice(wordings)
    return replace(problem, prompt=wording.format(**values))


class Paraphrased:
    """A task whose problems are `task`'s, each passed through `task.paraphrase(problem)`; every
    other attribute is the task's own."""

    def __init__(self, task, name: str):
        if not hasattr(task, "paraphrase"):
            raise ValueError(
                f"task '{name}' has no paraphrase of its prompts; fix: drop task.paraphrase, or "
                "use a task that rewords its prompts (arithmetic, target_string, or jsonl with "
                "task.paraphrase_field naming a column of reworded prompts)"
            )
        self.task = task
        task.paraphrase(task.train_problem(0))  # a task that cannot reword its data says so now

    def __getattr__(self, name: str):
        if name == "task":  # not set yet (a copy under construction): no recursion
            raise AttributeError(name)
        return getattr(self.task, name)

    def train_problem(self, index: int) -> Problem:
        return self.task.paraphrase(self.task.train_problem(index))

    def eval_problems(self) -> list[Problem]:
        return [self.task.paraphrase(p) for p in self.task.eval_problems()]
