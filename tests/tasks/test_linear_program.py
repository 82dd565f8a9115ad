"""The tiny integer-LP task: scipy's optimum against enumeration, and demonstrations whose
programs print it (or, flawed, miss the last constraint)."""

from __future__ import annotations

import contextlib
import io
import itertools
import random

import pytest

from rlvr.models.tiny import build_tokenizer
from rlvr.rewards.optimization import answer_code, elements_term, well_formed
from rlvr.tasks.linear_program import MAX_RHS, LinearProgramParams, LinearProgramTask, optimum


def task(**params):
    return LinearProgramTask(LinearProgramParams(**params), seed=0, eval_size=16)


def brute_force(objective, rows, bounds):
    points = itertools.product(range(MAX_RHS + 1), repeat=2)
    feasible = [
        p for p in points if all(r[0] * p[0] + r[1] * p[1] <= b for r, b in zip(rows, bounds))
    ]
    return max(objective[0] * x + objective[1] * y for x, y in feasible)


def test_scipy_optimum_matches_enumeration():
    rng = random.Random(0)
    for _ in range(50):
        rows = [[rng.randint(1, 9), rng.randint(1, 9)] for _ in range(rng.randint(1, 4))]
        objective, bounds = (
            [rng.randint(1, 9), rng.randint(1, 9)],
            [rng.randint(1, 20) for _ in rows],
        )
        assert optimum(objective, rows, bounds) == brute_force(objective, rows, bounds)


def test_the_known_example():
    assert optimum([3, 2], [[1, 1], [2, 1]], [4, 6]) == 10  # at x = 2, y = 2


def printed(program_reply: str) -> int:
    code = answer_code(program_reply)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})  # our own demonstration, not model output
    return int(out.getvalue())


@pytest.mark.parametrize("constraints", [1, 2, 3])
def test_problems_and_their_demonstrations(constraints):
    t = task(constraints=constraints)
    tokenizer = build_tokenizer(t.added_tokens)
    assert all(len(tokenizer(tag)["input_ids"]) == 1 for tag in t.added_tokens)
    for problem in t.eval_problems():
        objective, rows, bounds = (problem.metadata[k] for k in ("objective", "rows", "bounds"))
        assert len(rows) == constraints and all(1 <= c <= 5 for c in objective + sum(rows, []))
        assert int(problem.answer) == brute_force(objective, rows, bounds)
        demo = t.demonstration(problem)
        assert well_formed(demo) and elements_term(demo) == pytest.approx(1.0)
        assert printed(demo) == int(problem.answer)
        assert tokenizer.unk_token_id not in tokenizer(problem.prompt + demo)["input_ids"]


def test_flawed_demonstrations_drop_the_last_constraint():
    t = task(constraints=2)
    problems = [t.train_problem(i) for i in range(40)]
    relaxed = [p for p in problems if printed(t.demonstration(p, flawed=True)) != int(p.answer)]
    for p in problems:
        objective, rows, bounds = (p.metadata[k] for k in ("objective", "rows", "bounds"))
        flawed = printed(t.demonstration(p, flawed=True))
        assert flawed == brute_force(objective, rows[:-1], bounds[:-1]) >= int(p.answer)
    assert len(relaxed) >= 10  # the dropped constraint binds often enough to matter


def test_eval_and_train_are_disjoint_and_seeded():
    t = task()
    eval_ids = {p.id for p in t.eval_problems()}
    train = [t.train_problem(i) for i in range(100)]
    assert not eval_ids & {p.id for p in train}
    assert [p.id for p in train[:5]] == [task().train_problem(i).id for i in range(5)]
