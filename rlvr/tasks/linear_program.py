"""Tiny integer linear programs in two variables ("Maximize 3x+2y subject to ..."), answered
MiniOpt's way: the five-element model in <think>, then a program whose output is the optimum."""

from __future__ import annotations

import random

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import LinearConstraint, milp

from rlvr.rewards.optimization import TAGS
from rlvr.tasks.base import GeneratedTask
from rlvr.types import Problem

# Every coefficient is at least 1, so no variable exceeds the largest right-hand side.
MAX_RHS = 20


def _linear(coefficients: list[int]) -> str:
    return "+".join(f"{c}{v}" if c > 1 else v for c, v in zip(coefficients, "xy"))


def _code_linear(coefficients: list[int]) -> str:
    return "+".join(f"{c}*{v}" if c > 1 else v for c, v in zip(coefficients, "xy"))


def optimum(objective: list[int], rows: list[list[int]], bounds: list[int]) -> int:
    """max objective . (x, y) over integers x, y >= 0 with rows . (x, y) <= bounds, by scipy's
    MILP solver (HiGHS)."""
    result = milp(
        -np.asarray(objective, dtype=float),
        constraints=LinearConstraint(np.asarray(rows, dtype=float), -np.inf, bounds),
        integrality=np.ones(2),
    )
    if not result.success:
        raise RuntimeError(f"the MILP solver failed on a bounded problem: {result.message}")
    return round(-result.fun)


class LinearProgramParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    constraints: int = Field(2, ge=1, le=4, description="Inequality constraints per problem.")
    max_coefficient: int = Field(
        5, ge=1, le=9, description="Largest coefficient in the objective and the constraints."
    )


class LinearProgramTask(GeneratedTask):
    """Two-variable integer linear programs, scored by running the reply's program (`miniopt`).

    Maximise a linear objective over non-negative integers x, y under `constraints`
    inequalities (coefficients 1..max_coefficient, right-hand sides up to 20); the optimum comes
    from scipy's MILP solver."""

    name = "linear_program"
    verifier = "miniopt"
    Params = LinearProgramParams
    # examples/miniopt.toml: programs run to about 200 tokens.
    recommended_tiny = {
        "rollout.batch_size": 64,
        "rollout.max_new_tokens": 224,
        "train.lr": 2e-5,
        "train.micro_batch_size": 32,
    }
    # The embedded tokenizer spells each tag as one token, as a real tokenizer's <think> is.
    added_tokens = TAGS

    def __init__(self, params: LinearProgramParams, seed: int, eval_size: int):
        self.params = params
        super().__init__(seed, eval_size)

    def draw(self, rng: random.Random) -> Problem:
        top = self.params.max_coefficient
        objective = [rng.randint(1, top), rng.randint(1, top)]
        rows = [[rng.randint(1, top), rng.randint(1, top)] for _ in range(self.params.constraints)]
        bounds = [rng.randint(top, MAX_RHS) for _ in rows]
        constraints = ", ".join(f"{_linear(r)}<={b}" for r, b in zip(rows, bounds))
        prompt = f"Maximize {_linear(objective)} subject to {constraints}, x,y>=0 integers."
        return Problem(
            id=f"lp-{prompt}",
            prompt=prompt,
            answer=str(optimum(objective, rows, bounds)),
            domain="optimization",
            metadata={"objective": objective, "rows": rows, "bounds": bounds},
        )

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        """The five elements, then a program that enumerates the integer points; `flawed` drops
        the last of several constraints from the program (the modelling slip RL has to fix)."""
        objective, rows, bounds = (problem.metadata[k] for k in ("objective", "rows", "bounds"))
        constraints = [f"{_linear(r)}<={b}" for r, b in zip(rows, bounds)]
        checks = [f"{_code_linear(r)}<={b}" for r, b in zip(rows, bounds)]
        if flawed and len(checks) > 1:
            checks = checks[:-1]
        program = (
            f"R=range({MAX_RHS + 1})\n"
            f"print(max({_code_linear(objective)} for x in R for y in R if {' and '.join(checks)}))"
        )
        thinking = (
            "Sets: x,y\n"
            f"Parameters: c={','.join(map(str, objective))}\n"
            "Variables: x,y>=0 int\n"
            f"Objective: max {_linear(objective)}\n"
            f"Constraints: {', '.join(constraints)}"
        )
        return f"<think>{thinking}</think><answer>{program}</answer>"
