"""RGPO's rationale guidance (arXiv 2610.07342): a per-problem hint level over the segments of its
reference rationale, hinted prompts for failed groups, and the revised rollouts worth imitating."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from rlvr.types import Batch, Problem, Trajectory


def rationale_segments(rationale: str, count: int) -> list[str]:
    """`rationale` cut into `count` consecutive pieces that join back to it: whole lines where it
    has enough of them, else whole words, else characters (some pieces may be empty then)."""
    units = rationale.splitlines(keepends=True)
    if len(units) < count:
        units = re.split(r"(?<=\s)(?=\S)", rationale)  # each word with the space after it
    if len(units) < count:
        units = list(rationale)
    return ["".join(part) for part in np.array_split(np.array(units, dtype=object), count)]


def hinted(problem: Problem, hint: str) -> Problem:
    """The problem with `hint` appended to its last user message; answer and id unchanged, so the
    same verifier scores the revised reply."""
    if isinstance(problem.prompt, str):
        return replace(problem, prompt=f"{problem.prompt}\n\nHint: {hint}")
    messages = problem.messages()
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[last] = dict(messages[last], content=f"{messages[last]['content']}\n\nHint: {hint}")
    return replace(problem, prompt=messages)


def kept_revisions(
    unguided: list[Trajectory], guided: list[Trajectory]
) -> list[tuple[Trajectory, Trajectory]]:
    """(revised rollout, an unguided rollout of its problem) for each revised rollout that beats
    every unguided rollout of its problem; matched by problem id. Rollouts without a reply token
    (a prompt that filled the budget) and revisions whose reward failed (infra_error) are left out."""
    best: dict[str, float] = {}
    replied: dict[str, Trajectory] = {}
    for t in unguided:
        best[t.problem.id] = max(best.get(t.problem.id, float("-inf")), t.reward)
        if 1 in t.loss_mask:
            replied.setdefault(t.problem.id, t)
    return [
        (g, replied[g.problem.id])
        for g in guided
        if g.problem.id in replied and 1 in g.loss_mask and g.status != "infra_error"
        and g.reward > best[g.problem.id]
    ]  # fmt: skip


def on_original_prompt(revised: Trajectory, unguided: Trajectory) -> Trajectory:
    """The revised reply re-based on the problem's own prompt (the tokens of an unguided rollout
    before its reply): the auxiliary loss teaches the reply without the hint. Single-turn."""
    prompt = unguided.loss_mask.index(1)
    start = revised.loss_mask.index(1)
    reply = revised.token_ids[start:]
    return replace(
        revised,
        group_id=unguided.group_id,
        token_ids=unguided.token_ids[:prompt] + reply,
        loss_mask=[0] * prompt + revised.loss_mask[start:],
        behaviour_logprobs=[0.0] * prompt + revised.behaviour_logprobs[start:],
        turn_ends=[prompt + len(reply)],
        versions=[],
    )


class Guidance:
    """Each problem's hint level: the number of rationale segments its hinted prompt shows. A
    failed group raises it by one (up to all `segments`), a solved group lowers it by one."""

    def __init__(self, segments: int):
        self.segments = segments
        self.levels: dict[str, int] = {}

    def observe(self, trajectories: list[Trajectory]) -> None:
        solved: dict[str, bool] = {}
        for t in trajectories:
            solved[t.problem.id] = solved.get(t.problem.id, False) or t.correct
        for problem_id, ok in solved.items():
            level = min(self.levels.get(problem_id, 0) + (-1 if ok else 1), self.segments)
            if level > 0:
                self.levels[problem_id] = level
            else:  # kept only while a hint is needed: a stream of fresh problems stays small
                self.levels.pop(problem_id, None)

    def hint(self, problem: Problem, rationale: str) -> Problem | None:
        """The hinted problem at its level; None at level 0 (no hint needed)."""
        level = self.levels.get(problem.id, 0)
        if level == 0:
            return None
        return hinted(problem, "".join(rationale_segments(rationale, self.segments)[:level]))

    def state_dict(self) -> dict:
        return {"levels": dict(self.levels)}

    def load_state_dict(self, state: dict) -> None:
        self.levels = dict(state["levels"])


def guided_step(
    guidance: Guidance,
    task,
    runner,
    trajectories: list[Trajectory],
    group_size: int,
    seed,
    pad_id: int,
) -> tuple[Batch | None, dict[str, float]]:
    """One step of RGPO after the unhinted rollouts: update the hint levels, re-roll the problems
    that need a hint with `runner` (group_size each, seeded from `seed`), and return the revised
    replies that beat every unhinted rollout of their problem, re-based on the unhinted prompt
    (None when none did), with the step's metrics."""
    guidance.observe(trajectories)
    problems = list({t.problem.id: t.problem for t in trajectories}.values())
    hints = [guidance.hint(p, task.demonstration(p)) for p in problems]
    hinted_problems = [h for h in hints if h is not None]
    levels = [guidance.levels.get(p.id, 0) for p in problems]
    metrics = {
        "rgpo/hinted_groups": len(hinted_problems) / len(problems),
        "rgpo/mean_level": sum(levels) / len(levels),
    }
    if not hinted_problems:
        return None, metrics
    revised = runner.collect(hinted_problems, group_size, seed)
    kept = kept_revisions(trajectories, revised)
    metrics["rgpo/revised_accuracy"] = sum(t.correct for t in revised) / len(revised)
    metrics["rgpo/rescued_groups"] = len({r.problem.id for r, _ in kept}) / len(hinted_problems)
    metrics["rgpo/imitated"] = len(kept)
    if not kept:
        return None, metrics
    rebased = [on_original_prompt(r, u) for r, u in kept]
    return Batch.from_trajectories(rebased, pad_id), metrics
