import sys
import types

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.tasks import GuessNumberTask
from rlvr.tasks.guess_number import GuessNumberParams
from rlvr.train.setup import Components
from rlvr.train.task_filter import (
    FilteredTask,
    oracle_successes,
    play,
    screen_task,
    scripted,
    verifier_consistent,
)
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Score

KINDS = ["clean", "always_zero", "shortcut", "lenient"]


def score(problem: Problem, reply: str) -> Score:
    """The problem's own verifier: correct, broken to always 0, rewarding the answer format
    alone (a shortcut), or accepting anything, an empty reply included."""
    kind = problem.metadata["verifier"]
    if kind == "always_zero":
        return Score(0.0)
    if kind == "shortcut":
        return Score(float("####" in reply))
    if kind == "lenient":
        return Score(1.0)
    return Score(float(reply.strip() == f"#### {problem.answer}"))


class ToyTask:
    """Sums 'a+b=' whose verifier is chosen per problem from KINDS, in turn."""

    name = "toy"
    verifier = None  # the env scores

    def train_problem(self, index: int) -> Problem:
        a, b = index, 2 * index + 1
        kind = KINDS[index % len(KINDS)]
        return Problem(f"toy-{index}", f"{a}+{b}=", str(a + b), metadata={"verifier": kind})

    def eval_problems(self) -> list[Problem]:
        return [self.train_problem(0)]

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        return f"#### {problem.answer}"

    def make_env(self, reward=None, verifier=None) -> SingleTurnEnv:
        return SingleTurnEnv(score, score)


def components(task) -> Components:
    return Components(task, None, None, None, None, None)


def config(*overrides: str):
    return load_config(None, ["rollout.max_new_tokens=8", "task.filter_pool=8", *overrides])


def kinds(problems: list[Problem]) -> list[str]:
    return [p.metadata["verifier"] for p in problems]


def solver(messages) -> str:
    """An oracle that adds the prompt's two numbers."""
    a, b = messages[-1]["content"].rstrip("=").split("+")
    return f"#### {int(a) + int(b)}"


@pytest.fixture
def oracles(monkeypatch):
    """`oracles:solver`, `oracles:third_time` (right only from its third try at each problem)
    and `oracles:never`, as `module:function` paths."""
    tries: dict[str, int] = {}

    def third_time(messages) -> str:
        prompt = messages[-1]["content"]
        tries[prompt] = tries.get(prompt, 0) + 1
        return solver(messages) if tries[prompt] >= 3 else "#### -1"

    module = types.ModuleType("oracles")
    module.solver, module.third_time = solver, third_time
    module.never = lambda messages: "#### -1"
    monkeypatch.setitem(sys.modules, "oracles", module)


def test_verifier_consistency_drops_broken_and_lenient_verifiers():
    task = ToyTask()
    problems = [task.train_problem(i) for i in range(8)]
    kept = verifier_consistent(config(), components(task), problems, None, None)
    # always_zero rejects its reference; shortcut passes another problem's answer; lenient
    # passes the empty reply
    assert [k for k, keep in zip(kinds(problems), kept.tolist()) if keep] == ["clean", "clean"]


def test_solvable_by_a_callable_oracle_within_k_tries(oracles):
    task = ToyTask()
    problems = [task.train_problem(i) for i in range(4)]
    cfg = config("task.filter_oracle=oracles:solver", "task.filter_k=2")
    correct = oracle_successes(cfg, components(task), problems, None, None)
    assert correct.tolist() == [[True, True], [False, False], [True, True], [True, True]]
    # on clean verifiers (the others pass its wrong answers too); it counts tries per problem
    late = config("task.filter_oracle=oracles:third_time", "task.filter_k=3")
    clean = [task.train_problem(0), task.train_problem(4)]
    assert oracle_successes(late, components(task), clean, None, None).tolist() == [
        [False, False, True],
        [False, False, True],
    ]
    late = config("task.filter_oracle=oracles:third_time", "task.filter_k=2")
    clean = [task.train_problem(8), task.train_problem(12)]
    assert not oracle_successes(late, components(task), clean, None, None).any()


def test_screen_task_runs_both_filters_and_cycles_over_what_is_kept(oracles):
    task = ToyTask()
    cfg = config("task.filter=[solvable, verifier_consistent]", "task.filter_oracle=oracles:solver")
    messages = []
    filtered = screen_task(cfg, components(task), None, None, messages.append)
    assert isinstance(filtered, FilteredTask)
    assert messages == [
        "task.filter: training on 2 of 8 screened problems "
        "(verifier_consistent dropped 6, solvable dropped 0)"
    ]
    drawn = [filtered.train_problem(i).id for i in range(6)]
    assert set(drawn) == {"toy-0", "toy-4"} and drawn.count("toy-0") == 3
    assert filtered.eval_problems() == task.eval_problems()  # eval is never filtered


def test_the_policy_and_a_model_path_are_oracles_too(tmp_path):
    tokenizer = build_tokenizer()
    model = build_model("nano", tokenizer, seed=0)  # untrained: solves only what accepts anything
    task = ToyTask()
    cfg = config("task.filter=[solvable]")
    problems = [task.train_problem(i) for i in range(8)]
    correct = oracle_successes(cfg, components(task), problems, model, tokenizer)
    assert correct.any(dim=1).tolist() == [k == "lenient" for k in kinds(problems)]
    model.save_pretrained(tmp_path / "oracle")
    tokenizer.save_pretrained(tmp_path / "oracle")
    by_path = config("task.filter=[solvable]", f"task.filter_oracle={tmp_path / 'oracle'}")
    assert oracle_successes(by_path, components(task), problems, None, None).equal(correct)


def test_a_filter_that_keeps_nothing_stops_the_run(oracles):
    cfg = config("task.filter=[verifier_consistent, solvable]", "task.filter_oracle=oracles:never")
    with pytest.raises(
        ConfigError, match="kept none of the task.filter_pool=8 .*solvable dropped 2"
    ):
        screen_task(cfg, components(ToyTask()), None, None, lambda message: None)


def test_multi_turn_demonstrations_are_replayed_in_the_env():
    task = GuessNumberTask(GuessNumberParams(max_number=16, max_guesses=8), seed=0, eval_size=4)
    problem = task.train_problem(0)
    replies = [m["content"] for m in task.demonstration(problem) if m["role"] == "assistant"]
    assert play(task.make_env(), problem, scripted(replies), 8)
    assert not play(task.make_env(), problem, scripted([]), 8)
    cfg = config("task.filter_pool=4")
    problems = [task.train_problem(i) for i in range(4)]
    assert verifier_consistent(cfg, components(task), problems, None, None).all()


def test_the_trainer_trains_on_the_screened_problems(fast_overrides):
    cfg = load_config(
        None, [*fast_overrides, "task.filter=[verifier_consistent]", "task.filter_pool=6"]
    )
    trainer = Trainer(cfg)
    try:
        assert isinstance(trainer.components.task, FilteredTask)
        pool = {trainer.components.task.task.train_problem(i).id for i in range(6)}
        assert {p.id for p in trainer.problems(0, 12)} == pool  # arithmetic's verifier is sound
    finally:
        trainer.updater.close()
        trainer.source.close()
