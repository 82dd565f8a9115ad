from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.models.tiny import build_tokenizer
from rlvr.tasks.tree_search import TreeSearchParams, TreeSearchTask
from rlvr.train.components import build_components
from rlvr.train.trainer import Trainer
from rlvr.train.warmstart import sft_example
from rlvr.types import Trajectory

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tree_search.toml"


def task(**params):
    return TreeSearchTask(TreeSearchParams(**params), seed=0, eval_size=8)


def outcome(task, problem, **kw) -> Trajectory:
    """The problem as a trajectory whose episode succeeded or not."""
    return Trajectory(problem, 0, 0, [], [], [], [1.0], [], **kw)


def replay(t, problem):
    env = t.make_env()
    env.reset(problem)
    replies = [m for m in t.demonstration(problem) if m["role"] == "assistant"]
    results = [env.step(m["content"]) for m in replies]
    return results, env


def test_demonstrations_are_legal_random_walks_not_a_search():
    t = task(start_depth=3, min_depth=3, max_depth=3, max_moves=24)
    walks = [replay(t, t.train_problem(i)) for i in range(200)]
    assert not any("invalid" in (r.observation or "") for results, _ in walks for r in results)
    assert all(results[-1].done and not any(r.done for r in results[:-1]) for results, _ in walks)
    # a random walk re-enters nodes it has explored (depth-first search never does) and
    # sometimes runs out of moves: there is a search for RL to learn
    assert sum(env.revisits > 0 for _, env in walks) > 100
    assert 0.3 < sum(results[-1].info["correct"] for results, _ in walks) / 200 < 0.9


def test_the_curriculum_deepens_when_the_deepest_trees_are_mostly_solved():
    t = task(min_depth=1, start_depth=1, max_depth=3, advance_at=0.75)
    # before any outcome (the warm start) every training depth is drawn
    assert {t.train_problem(i).metadata["depth"] for i in range(50)} == {1, 2, 3}
    shallow = next(p for p in map(t.train_problem, range(50)) if p.metadata["depth"] == 1)
    metrics = t.observe([outcome(t, shallow, correct=c) for c in (True, True, False, False)])
    assert metrics == {"curriculum/depth": 1.0, "curriculum/success": 0.5}
    assert {t.train_problem(i).metadata["depth"] for i in range(50)} == {1}
    metrics = t.observe([outcome(t, shallow, correct=c) for c in (True, True, True, False)])
    assert metrics == {"curriculum/depth": 2.0, "curriculum/success": 0.75}
    assert {t.train_problem(i).metadata["depth"] for i in range(50)} == {1, 2}
    # only trees of the current deepest depth count, and the curriculum stops at max_depth
    assert t.observe([outcome(t, shallow, correct=True)])["curriculum/depth"] == 2.0
    by_depth = {p.metadata["depth"]: p for p in map(t.train_problem, range(50))}
    assert t.observe([outcome(t, by_depth[2], correct=True)])["curriculum/depth"] == 3.0
    by_depth = {p.metadata["depth"]: p for p in map(t.train_problem, range(50))}
    assert t.observe([outcome(t, by_depth[3], correct=True)])["curriculum/depth"] == 3.0
    resumed = task(min_depth=1, start_depth=1, max_depth=3)
    resumed.load_state_dict(t.state_dict())
    assert [resumed.train_problem(i) for i in range(20)] == [t.train_problem(i) for i in range(20)]


def test_eval_trees_are_fixed_and_at_the_eval_depths_in_turn():
    t = task(eval_depths=[3, 4])
    evals = t.eval_problems()
    assert [p.metadata["depth"] for p in evals] == [3, 4] * 4
    assert evals == task(eval_depths=[3, 4]).eval_problems()
    assert all(len(p.answer) == p.metadata["depth"] for p in evals)
    assert evals[0].prompt.startswith("Find the goal leaf. r: ")


def test_warm_start_trains_on_the_moves_and_no_observation():
    tokenizer = build_tokenizer()
    t = task(min_depth=2, start_depth=2, max_depth=2)
    ids, mask = sft_example(tokenizer, t, index=5, flawed=False)
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    replies = [
        m["content"] for m in t.demonstration(t.train_problem(5)) if m["role"] == "assistant"
    ]
    assert trained == "".join(r + "<|end|>" for r in replies)
    assert ":" not in trained


def test_bad_depths_name_the_keys():
    with pytest.raises(ConfigError, match="task.start_depth = 3"):
        build_components(load_config(EXAMPLE, ["task.start_depth=3"]))
    with pytest.raises(ConfigError, match="task.eval_depths"):
        build_components(load_config(EXAMPLE, ["task.eval_depths=[0]"]))


def test_the_curriculum_is_checkpointed_and_resumed(fast_overrides):
    overrides = fast_overrides + [
        "task.name=tree_search", "task.max_moves=3", "task.min_depth=1", "task.start_depth=1",
        "task.max_depth=2", "task.eval_size=2", "rollout.max_turns=3",
        "rollout.max_new_tokens=6", "rollout.batch_size=8", "train.eval_k=1",
        "log.name=curriculum",
    ]  # fmt: skip
    trainer = Trainer(load_config(None, [*overrides, "train.steps=1"]))
    trainer.components.task.curriculum.load_state_dict({"depth": 2, "started": True})
    trainer.run()  # as if training had advanced it
    assert [r["curriculum/depth"] for r in trainer.run_dir.read_metrics() if "loss" in r] == [2.0]
    resumed = Trainer(load_config(None, [*overrides, "train.steps=2"]), resume=trainer.run_dir.path)
    assert resumed.components.task.state_dict() == {"depth": 2, "started": True}
