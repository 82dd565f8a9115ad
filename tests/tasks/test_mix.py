import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.tasks import TASKS
from rlvr.tasks.mix import MixTask
from rlvr.train.components import build_components, build_task
from rlvr.train.metrics import domain_metrics
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Trajectory

ADD_SUB = "task.domains={add: {name: arithmetic, operations: [add]}, sub: {name: arithmetic, operations: [sub], weight: 2}}"  # noqa: E501
WORDS = "task.domains={add: {name: arithmetic, operations: [add], digits: 2}, words: {name: target_string, target: hello}}"  # noqa: E501


def mix(*overrides):
    return build_task(load_config(None, ["task.name=mix", *overrides]))


def test_the_stream_keeps_each_cycle_balanced_and_each_domain_in_its_own_order():
    task = mix(ADD_SUB, "task.eval_size=5")
    problems = [task.train_problem(i) for i in range(30)]
    for cycle in range(10):
        domains = [p.domain for p in problems[3 * cycle : 3 * cycle + 3]]
        assert sorted(domains) == ["add", "sub", "sub"]
    assert [p.domain for p in problems[:9]] != ["sub", "sub", "add"] * 3  # shuffled per cycle
    subs = [p for p in problems if p.domain == "sub"]
    member = task.members["sub"]
    assert [p.id for p in subs] == [f"sub:{member.train_problem(i).id}" for i in range(20)]
    assert all("-" in p.prompt for p in subs) and all("+" in p.prompt for p in problems
                                                       if p.domain == "add")  # fmt: skip
    again = mix(ADD_SUB, "task.eval_size=5")
    assert [again.train_problem(i).id for i in range(30)] == [p.id for p in problems]
    # Each domain has a seed of its own: the two arithmetic domains draw different operands.
    add = [p.metadata["a"] for p in problems if p.domain == "add"][:10]
    assert add != [p.metadata["a"] for p in subs][:10]
    assert TASKS["mix"] is MixTask


def test_eval_holds_each_domains_own_held_out_set():
    task = mix(WORDS, "task.eval_size=6")
    problems = task.eval_problems()
    assert [p.domain for p in problems] == ["add"] * 6 + ["words"] * 6
    train = {task.train_problem(i).id for i in range(200)}
    assert not train & {p.id for p in problems}
    words = next(p for p in problems if p.domain == "words")
    assert task.demonstration(words) == "hello"


def test_each_problem_is_scored_by_its_own_domains_verifier():
    components = build_components(load_config(None, ["task.name=mix", WORDS]))
    task, verifier = components.task, components.verifier
    add = next(p for p in task.eval_problems() if p.domain == "add")
    words = next(p for p in task.eval_problems() if p.domain == "words")
    assert verifier(words, "hello").value == 1.0  # exact_reply
    assert verifier(words, f"#### {add.answer}").value == 0.0
    assert verifier(add, f"#### {add.answer}").value == 1.0  # numeric
    assert verifier(add, "hello").value == 0.0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task.domains={a: {name: arithmetic, digitz: 2}}"], "task.domains.a.digitz"),
        (["task.domains={a: {name: arithmatic}}"], "task.domains.a.name"),
        (["task.domains={a: {name: guess_number}}"], "plays as its own environment"),
        (["task.domains={a: {name: arithmetic, weight: 0}}"], "task.domains.a.weight"),
        ([ADD_SUB, "task.rewards={numeric: 1.0}"], "task.rewards does not combine"),
    ],
)
def test_bad_domains_are_refused_by_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        build_components(load_config(None, ["task.name=mix", *overrides]))


def _trajectory(domain: str, correct: bool) -> Trajectory:
    return Trajectory(
        problem=Problem(id=domain, prompt="?", domain=domain), group_id=0, sample_index=0,
        token_ids=[1, 2], loss_mask=[0, 1], behaviour_logprobs=[0.0, -1.0],
        turn_rewards=[float(correct)], turn_ends=[2], correct=correct,
    )  # fmt: skip


def test_domain_metrics_split_accuracy_and_reward_and_stay_quiet_for_one_domain():
    batch = [_trajectory("a", True), _trajectory("a", False), _trajectory("b", True)]
    assert domain_metrics(batch, "eval/") == {
        "eval/domain/a/accuracy": 0.5, "eval/domain/a/reward": 0.5,
        "eval/domain/b/accuracy": 1.0, "eval/domain/b/reward": 1.0,
    }  # fmt: skip
    assert domain_metrics(batch[:2]) == {}


def test_a_mixed_run_logs_every_domain_in_training_and_eval(fast_overrides, tmp_path):
    cfg = load_config(None, [*fast_overrides, "task.name=mix", WORDS, "train.steps=1",
                             "log.name=mix"])  # fmt: skip
    summary = Trainer(cfg).run()
    base = summary["base_eval"]
    for key in ("accuracy", "pass@1", "pass@2"):
        domains = [base[f"eval/domain/{d}/{key}"] for d in ("add", "words")]
        # Equal held-out sets, so the overall figure is the mean of the two.
        assert base[f"eval/{key}"] == pytest.approx(sum(domains) / 2)
    records = (tmp_path / "runs" / "mix" / "metrics.jsonl").read_text().splitlines()
    step = next(json.loads(r) for r in records if "loss" in json.loads(r))
    assert {"domain/add/accuracy", "domain/words/accuracy"} <= set(step)
