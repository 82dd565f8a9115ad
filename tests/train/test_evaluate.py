"""Held-out evaluation on a scripted policy: greedy accuracy, and the critical path of replies
that hold parallel-thread regions."""

import pytest

from rlvr.config import load_config
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.models.tiny import build_tokenizer
from rlvr.rollout import EpisodeRunner, SamplingParams
from rlvr.rollout.engine import Completion
from rlvr.tasks.thread_tags import TAG_TOKENS
from rlvr.train.evaluate import difficulty, evaluate
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Score

TOKENIZER = build_tokenizer(TAG_TOKENS)  # each tag one token, every other character one
PARALLEL = (  # 2 + 3 + 3 + 1 + 5 + 4 + 1 + 6 = 25 tokens, 21 on the critical path
    "<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines>"
    "<Thread>123</Thread><Thread>12</Thread></Parallel>#### 5"
)
SEQUENTIAL = "12 #### 7"  # 9 tokens


class ScriptedPolicy:
    """Replies PARALLEL to prompts about x, SEQUENTIAL to the rest."""

    def generate(self, prompts, params, seeds=None):
        texts = [TOKENIZER.decode(ids, skip_special_tokens=True) for ids in prompts]
        replies = [PARALLEL if "x" in text else SEQUENTIAL for text in texts]
        encoded = [TOKENIZER(r, add_special_tokens=False)["input_ids"] for r in replies]
        return [Completion(i, [0.0] * len(i), "eos", r) for i, r in zip(encoded, replies)]


def ends_in_five(problem, response):
    return Score(float(response.endswith("5")), "ok")


def run(problems):
    env = lambda: SingleTurnEnv(ends_in_five, ends_in_five)  # noqa: E731
    runner = EpisodeRunner(ScriptedPolicy(), TOKENIZER, env, SamplingParams(64, 1.0))
    return evaluate(runner, problems, 1, 0)


def test_replies_with_regions_report_their_critical_path_and_share():
    metrics = run([Problem("1", "x?"), Problem("2", "y?"), Problem("3", "x!")])
    assert metrics["eval/accuracy"] == pytest.approx(2 / 3)
    assert metrics["eval/critical_path_tokens"] == pytest.approx((21 + 9 + 21) / 3)
    assert metrics["eval/parallel_share"] == pytest.approx(2 / 3)


def test_sequential_replies_report_no_critical_path():
    metrics = run([Problem("1", "y?"), Problem("2", "z?")])
    assert metrics["eval/accuracy"] == 0.0
    assert "eval/critical_path_tokens" not in metrics and "eval/parallel_share" not in metrics


def test_every_eval_of_a_run_samples_the_same_seeds(fast_overrides, monkeypatch):
    """So an unchanged model scores the same pass@k at every step, and a curve moves only when
    the model does."""
    trainer = Trainer(load_config(None, fast_overrides))
    seen: list[list[int]] = []
    engine = trainer.source.evaluator.engine
    generate = engine.generate

    def recording(prompts, params, seeds=None):
        if params.temperature > 0:
            seen.append(list(seeds))
        return generate(prompts, params, seeds)

    monkeypatch.setattr(engine, "generate", recording)
    try:
        first = trainer.evaluate()
        trainer.state["step"] = 7
        later = trainer.evaluate()
    finally:
        trainer.close()
    assert len(seen) == 2 and len(seen[0]) == 8 * 2  # 8 problems, k = 2
    assert seen[0] == seen[1]
    assert {k: v for k, v in first.items() if k.startswith("eval/")} == {
        k: v for k, v in later.items() if k.startswith("eval/")
    }


def test_difficulty_names_a_base_too_weak_or_already_done_and_is_silent_between():
    weak = {"eval/accuracy": 0.0, "eval/pass@1": 0.0, "eval/pass@4": 0.0}
    assert "solves none of the held-out problems in 4 samples" in difficulty(weak, 4)
    assert "greedily" in difficulty({"eval/accuracy": 0.0}, 1)
    # one problem solved in one of its samples is something to learn from
    assert difficulty({"eval/accuracy": 0.0, "eval/pass@1": 0.01, "eval/pass@4": 0.02}, 4) is None
    done = {"eval/accuracy": 0.99, "eval/pass@1": 0.97, "eval/pass@4": 1.0}
    assert "already solves 99%" in difficulty(done, 4)
    # greedy right but samples often wrong: RL still sharpens sampling
    assert difficulty({"eval/accuracy": 0.99, "eval/pass@1": 0.80, "eval/pass@4": 1.0}, 4) is None
    assert difficulty({"eval/accuracy": 0.34, "eval/pass@1": 0.5, "eval/pass@4": 0.87}, 4) is None
