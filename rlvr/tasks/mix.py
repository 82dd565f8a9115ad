"""Several tasks as one (multi-domain RLVR): a domain-balanced train stream, each domain's
held-out set, and every problem scored by its own domain's verifier."""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from rlvr.registry import lookup, validate_params
from rlvr.tasks.base import seeded_rng
from rlvr.types import Message, Problem


class MixDomain(BaseModel):
    """One domain: a task by name, its share of the train stream, and the task's own settings
    as further keys (e.g. {name = "arithmetic", operations = ["sub"]})."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="Task name from `rlvr list tasks` (single-turn tasks).")
    weight: int = Field(
        1, ge=1, description="Problems of this domain in each cycle of the train stream."
    )


class MixParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    domains: dict[str, MixDomain] = Field(
        min_length=1,
        description="Domain name -> {name = a single-turn task, weight = its problems per "
        "cycle of the train stream (1), and that task's own keys}, e.g. {add = {name = "
        "'arithmetic', operations = ['add']}}. Each domain has its own seed and eval_size "
        "held-out problems; a problem's `domain` is its key, so metrics and POISE's probe split "
        "by it.",
    )


class MixTask:
    """Several tasks as one: each problem scored by its own domain's verifier, per-domain metrics.

    The train stream runs in cycles of `weight` problems per domain, shuffled per cycle by the
    seed: each batch is as balanced as its size allows, and each domain's problems are its own
    task's, in order."""

    name = "mix"
    verifier = "by_domain"  # built in setup from `verifiers`: each domain's own
    Params = MixParams

    def __init__(self, params: MixParams, seed: int, eval_size: int):
        from rlvr.tasks import TASKS  # imported here: rlvr.tasks imports this module

        self.seed = seed
        self.members = {}
        for domain, spec in params.domains.items():
            task_cls = lookup(TASKS, spec.name, f"task.domains.{domain}.name", "rlvr.tasks")
            if task_cls is MixTask or hasattr(task_cls, "make_env"):
                raise ValueError(
                    f"task.domains.{domain}: '{spec.name}' is a mix, or plays as its own "
                    "environment (multi-turn, or a reward of its own); a mix takes single-turn "
                    "tasks scored by a verifier"
                )
            member_params = validate_params(
                task_cls.Params, dict(spec.model_extra or {}), f"task.domains.{domain}"
            )
            # A seed of its own per domain, so two domains of one task draw different problems,
            # and a domain draws the same ones whatever else the mix holds.
            own_seed = seeded_rng(seed, "mix-domain", domain).randrange(2**31)
            self.members[domain] = task_cls(member_params, seed=own_seed, eval_size=eval_size)
        self.verifiers = {domain: task.verifier for domain, task in self.members.items()}
        self.cycle = [d for d, spec in params.domains.items() for _ in range(spec.weight)]

    def _as_domain(self, problem: Problem, domain: str) -> Problem:
        return replace(problem, id=f"{domain}:{problem.id}", domain=domain)

    def train_problem(self, index: int) -> Problem:
        epoch, position = divmod(index, len(self.cycle))
        order = list(self.cycle)
        seeded_rng(self.seed, "mix", epoch).shuffle(order)
        domain = order[position]
        # This domain's problems so far: every earlier cycle's, and those earlier in this one.
        own_index = epoch * self.cycle.count(domain) + order[:position].count(domain)
        return self._as_domain(self.members[domain].train_problem(own_index), domain)

    def eval_problems(self) -> list[Problem]:
        return [
            self._as_domain(problem, domain)
            for domain, task in self.members.items()
            for problem in task.eval_problems()
        ]

    def demonstration(self, problem: Problem, flawed: bool = False) -> str | list[Message]:
        return self.members[problem.domain].demonstration(problem, flawed)

    def fit_prompts(self, fit) -> None:
        for task in self.members.values():
            if hasattr(task, "fit_prompts"):
                task.fit_prompts(fit)

    def fingerprint(self) -> str:
        return ":".join(
            f"{domain}={task.fingerprint() if hasattr(task, 'fingerprint') else ''}"
            for domain, task in self.members.items()
        )
