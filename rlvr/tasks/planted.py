"""Addition environments with planted defects beside good ones (a wrong reference, an impossible
task, a hint that leaks the answer, a verifier that accepts anything): a test bed for
environment screens such as River's, and the labelled audits a tiny auditor is warm-started on."""

from __future__ import annotations

import random
from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.rewards.audit import DEFAULT_AUDIT_RUBRIC, check_rubric, parse_verdict, render_audit
from rlvr.rewards.match import numeric_match
from rlvr.tasks.arithmetic import SOLVERS
from rlvr.tasks.base import GeneratedTask
from rlvr.tasks.hints import hinted
from rlvr.types import Problem, Score

DEFECTS = ("wrong_reference", "impossible", "leaking_hint", "lenient_verifier")
KINDS = ("good", *DEFECTS)
SEEN_BY_AN_AUDIT = ("wrong_reference", "impossible", "leaking_hint")  # in statement or reference


class PlantedParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    digits: int = Field(
        2, ge=2, le=6, description="Digits of each operand (2 at least: a harmless hint, the "
        "first column's sum, must not be the whole answer)."
    )  # fmt: skip
    wrong_reference: float = Field(
        0.15, ge=0, le=1, description="Share whose reference answer is wrong (off by 1 or 10, or "
        "the sum without carries); the reference solution still computes the true sum."
    )  # fmt: skip
    impossible: float = Field(
        0.15, ge=0, le=1, description="Share whose statement hides an operand ('37+?=')."
    )
    leaking_hint: float = Field(
        0.15, ge=0, le=1, description="Share whose hint gives the answer away ('the answer is "
        "85', or the whole worked sum)."
    )  # fmt: skip
    lenient_verifier: float = Field(
        0.1, ge=0, le=1, description="Share whose verifier accepts any reply, an empty one too."
    )
    hint_share: float = Field(
        0.5, ge=0, le=1, description="Share of the problems without a leaking hint that carry a "
        "harmless one (the first column's sum), so that a hint alone is no sign of a leak."
    )  # fmt: skip

    @model_validator(mode="after")
    def _shares_fit(self) -> PlantedParams:
        total = sum(getattr(self, name) for name in DEFECTS)
        if total > 1:
            raise ValueError(f"the defect shares {', '.join(DEFECTS)} sum to {total:g}, over 1")
        return self


def worked_sum(a: int, b: int, flawed: bool = False) -> tuple[list[str], int]:
    """The column-by-column steps of a + b, and the sum they reach (carries dropped if flawed)."""
    steps, total = SOLVERS["add"](a, b, flawed)
    return steps, int(total)


def wrong_reference(rng: random.Random, a: int, b: int) -> int:
    """A plausible wrong answer to a + b: off by one or ten, or the sum without its carries."""
    right = a + b
    candidates = {right - 1, right + 1, right - 10, right + 10, worked_sum(a, b, True)[1]}
    return rng.choice(sorted(candidates - {right}))


class PlantedArithmetic(GeneratedTask):
    """'a+b=' environments, each good or carrying one planted defect (metadata['planted']). The
    reference solution (the demonstration) works the sum from the operands, so it stays right
    when the reference answer is wrong. Eval problems are planted alike: they are the held-out
    environments an audit is measured on (their operand pairs never occur in train)."""

    name = "planted"
    verifier = None  # each problem's own verifier scores, in the task's env
    Params = PlantedParams

    def __init__(self, params: PlantedParams, seed: int, eval_size: int):
        self.params = params
        super().__init__(seed, eval_size)

    def kind(self, draw: float) -> str:
        for name in DEFECTS:
            share = getattr(self.params, name)
            if draw < share:
                return name
            draw -= share
        return "good"

    def draw(self, rng: random.Random) -> Problem:
        low, high = 10 ** (self.params.digits - 1), 10**self.params.digits - 1
        a, b = rng.randint(low, high), rng.randint(low, high)
        kind = self.kind(rng.random())
        steps, right = worked_sum(a, b)
        prompt, reference = f"{a}+{b}=", right
        if kind == "wrong_reference":
            reference = wrong_reference(rng, a, b)
        if kind == "impossible":
            prompt = rng.choice([f"{a}+?=", f"?+{b}="])
        problem = Problem(
            id=f"planted-{a}+{b}",  # the pair alone: eval pairs never occur in train
            prompt=prompt,
            answer=str(reference),
            domain="planted",
            metadata={"op": "add", "a": a, "b": b, "planted": kind},
        )
        if kind == "leaking_hint":
            worked = " ".join(steps) + f" #### {right}"
            return hinted(problem, rng.choice([f"the answer is {right}", worked]))
        if rng.random() < self.params.hint_share:
            return hinted(problem, steps[0])
        return problem

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        steps, total = worked_sum(problem.metadata["a"], problem.metadata["b"], flawed)
        return " ".join(steps) + f" #### {total}"

    def make_env(self, reward=None, verifier=None) -> SingleTurnEnv:
        return SingleTurnEnv(self.score, self.score)

    def score(self, problem: Problem, response: str) -> Score:
        if problem.metadata["planted"] == "lenient_verifier":
            return Score(1.0)
        return numeric_match(problem, response)


def audit_demonstration(problem: Problem) -> str:
    """The worked audit of a planted environment from what an auditor is shown (statement and
    reference): an impossible statement, else the sum worked from the operands against the
    reference, and any hint checked for the answer. A lenient verifier is not shown, so its
    environment is audited as good."""
    kind, meta = problem.metadata["planted"], problem.metadata
    if kind == "impossible":
        return "an operand is missing | Verdict: no"
    steps, right = worked_sum(meta["a"], meta["b"])
    parts = [" ".join(steps) + f" #### {right}"]
    parts.append("reference " + ("wrong" if kind == "wrong_reference" else "right"))
    if "Hint:" in problem.messages()[-1]["content"]:
        parts.append("hint " + ("leaks" if kind == "leaking_hint" else "ok"))
    verdict = "yes" if kind not in SEEN_BY_AN_AUDIT else "no"
    return " | ".join([*parts, f"Verdict: {verdict}"])


class PlantedAuditParams(PlantedParams):
    rubric: str = Field(
        DEFAULT_AUDIT_RUBRIC, description="The audit prompt the environments are shown in, as "
        "methods.river.audit.rubric: fields {statement} and {reference}."
    )  # fmt: skip

    @model_validator(mode="after")
    def _rubric_fields(self) -> PlantedAuditParams:
        check_rubric(self.rubric)
        return self


class PlantedAudits:
    """The audits of PlantedArithmetic's environments as a task, to warm-start a tiny auditor on
    (`rlvr pretrain`): each prompt is the rubric filled in with an environment, each
    demonstration its worked audit. Train audits only environments of train operand pairs."""

    name = "planted_audits"
    verifier = None  # the env scores the verdict
    Params = PlantedAuditParams

    def __init__(self, params: PlantedAuditParams, seed: int, eval_size: int):
        self.rubric = params.rubric
        planted = PlantedParams(**params.model_dump(exclude={"rubric"}))
        self.environments = PlantedArithmetic(planted, seed, eval_size)

    def audit_problem(self, environment: Problem) -> Problem:
        verdict = audit_demonstration(environment).rsplit(" ", 1)[-1]
        return replace(
            environment, prompt=render_audit(self.rubric, environment), answer=verdict,
            metadata={**environment.metadata, "environment": environment},
        )  # fmt: skip

    def train_problem(self, index: int) -> Problem:
        return self.audit_problem(self.environments.train_problem(index))

    def eval_problems(self) -> list[Problem]:
        return [self.audit_problem(p) for p in self.environments.eval_problems()]

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        return audit_demonstration(problem.metadata["environment"])

    def make_env(self, reward=None, verifier=None) -> SingleTurnEnv:
        return SingleTurnEnv(self.score, self.score)

    def score(self, problem: Problem, response: str) -> Score:
        """1 for the right verdict; a reply without one is wrong (the auditor's own failure)."""
        return Score(float(parse_verdict(response) == (problem.answer == "yes")))
