"""RGPO (arXiv 2610.07342): a problem whose group has no correct rollout gets a hint, the first
segments of its reference rationale, and group_size re-rollouts with it; each revised reply that
beats every unhinted rollout of its problem is imitated on the prompt without the hint."""

from __future__ import annotations

from dataclasses import replace

from pydantic import Field

from rlvr.config import ConfigError
from rlvr.tasks.hints import hinted, rationale_segments
from rlvr.train.hooks import Method, MethodParams, Run, Step
from rlvr.train.update import Imitation, UpdateInputs
from rlvr.types import Batch, Problem, Trajectory

GUIDED_STREAM = 3  # sampling seeds of the hinted re-rollouts (eval samples on 1, River's on 2)


class Params(MethodParams):
    segments: int = Field(
        4,
        ge=1,
        description="Cut each problem's reference rationale (the task's demonstration; a JSONL "
        "file's solution_field) into this many segments. A problem whose group has no correct "
        "rollout gets one more segment of hint (one fewer once solved) and group_size "
        "re-rollouts with its hint appended to the prompt (single-turn tasks).",
    )
    sft_coef: float = Field(
        0.001,
        ge=0,
        description="Weight of the NLL of each hinted reply that beats every unhinted rollout of "
        "its problem, taught on the prompt without the hint (the paper: 0.001).",
    )


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


class RGPO(Method):
    """RGPO (arXiv 2610.07342): hinted re-rollouts for failed groups, and the rescued replies
    imitated on the unhinted prompt."""

    Params = Params
    reads_labels = True  # a group is hinted when the verifier finds no right answer in it

    @classmethod
    def check(cls, params: Params, cfg, task) -> None:
        if not isinstance(task.demonstration(task.train_problem(0)), str):
            raise ConfigError(
                f"methods.rgpo: task '{cfg.task.name}' is multi-turn (its demonstrations are "
                "conversations), and RGPO hints single-turn prompts. Fix: a single-turn task, or "
                "drop methods.rgpo"
            )
        if (cfg.methods.get("parason") or {}).get("dispatch"):
            raise ConfigError(
                "methods.rgpo hints prompts that methods.parason.dispatch would split into "
                "Parason's threads; fix: drop one of them"
            )
        m = cfg.model
        if m.pretrain_hint_share and m.pretrain_hint_segments != params.segments:
            raise ConfigError(
                f"the warm start hints with model.pretrain_hint_segments = "
                f"{m.pretrain_hint_segments} segments and methods.rgpo with {params.segments}; "
                f"fix: model.pretrain_hint_segments={params.segments}"
            )

    def setup(self, run: Run) -> None:
        self.run = run
        self.guidance = Guidance(self.params.segments)
        self.imitation: Batch | None = None

    def after_sample(self, step: Step) -> None:
        run = self.run
        self.imitation = None
        if not step.trajectories:
            return
        self.imitation, metrics = guided_step(
            self.guidance, run.components.task, run.source.evaluator, step.trajectories,
            run.cfg.rollout.group_size, (run.cfg.train.seed, GUIDED_STREAM, step.index),
            run.tokenizer.pad_token_id,
        )  # fmt: skip
        step.metrics.update(metrics)

    def update_inputs(self, step: Step, data: UpdateInputs) -> None:
        if self.imitation is not None:
            data.imitation = Imitation(self.imitation, self.params.sft_coef, "rgpo/imitation_nll")
        self.imitation = None

    def state_dict(self) -> dict:
        return self.guidance.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.guidance.load_state_dict(state)
