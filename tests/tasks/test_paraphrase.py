import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.rewards.match import NumericMatch
from rlvr.tasks.arithmetic import ArithmeticParams, ArithmeticTask
from rlvr.tasks.jsonl import JsonlParams, JsonlTask
from rlvr.tasks.paraphrase import Paraphrased
from rlvr.tasks.target_string import TargetStringParams, TargetStringTask
from rlvr.train.components import build_task
from rlvr.train.warmstart import warm_start_key


def test_arithmetic_rewords_each_problem_and_keeps_its_answer():
    task = ArithmeticTask(ArithmeticParams(operations=["add", "sub", "mul"]), seed=0, eval_size=30)
    reworded = Paraphrased(task, "arithmetic")
    pairs = list(zip(task.eval_problems(), reworded.eval_problems()))
    pairs += [(task.train_problem(i), reworded.train_problem(i)) for i in range(30)]
    words = {"add": "plus", "sub": "minus", "mul": "times"}
    for plain, other in pairs:
        assert (other.id, other.answer, other.metadata) == (plain.id, plain.answer, plain.metadata)
        meta = plain.metadata
        assert other.prompt != plain.prompt and str(meta["a"]) in other.prompt
        assert other.prompt in (
            f"What is {meta['a']} {words[meta['op']]} {meta['b']}?",
            f"Add {meta['a']} and {meta['b']}.",
            f"Subtract {meta['b']} from {meta['a']}.",
            f"Multiply {meta['a']} by {meta['b']}.",
        )
        # the verifier still accepts the task's own worked answer to the reworded problem
        assert NumericMatch()(other, reworded.demonstration(other)).value == 1.0
    assert len({p.prompt.split()[0] for _, p in pairs}) > 2  # more than one wording is used
    assert [p.prompt for p in Paraphrased(task, "x").eval_problems()] == [
        p.prompt for _, p in pairs[:30]
    ]  # one wording per problem, whoever asks


def test_target_string_rewords_the_cue():
    task = TargetStringTask(TargetStringParams(target="hello"), seed=0, eval_size=10)
    for plain, other in zip(task.eval_problems(), Paraphrased(task, "t").eval_problems()):
        cue = plain.metadata["cue"]
        assert other.prompt in (f"Tell me the word [{cue}]", f"{cue}: which word?")
        assert other.answer == plain.answer == "hello"


def test_jsonl_reads_the_reworded_prompt_from_its_column(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [{"q": f"{i}+{i}=", "alt": f"twice {i}?", "answer": str(2 * i)} for i in range(20)]
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")
    params = dict(path=str(path), prompt_field="q", verifier="numeric")
    task = JsonlTask(JsonlParams(**params, paraphrase_field="alt"), seed=0, eval_size=4)
    for plain, other in zip(task.eval_problems(), Paraphrased(task, "jsonl").eval_problems()):
        i = int(plain.answer) // 2
        assert (plain.prompt, other.prompt, other.answer) == (
            f"{i}+{i}=",
            f"twice {i}?",
            plain.answer,
        )
    without = JsonlTask(JsonlParams(**params), seed=0, eval_size=4)
    with pytest.raises(ValueError, match="task.paraphrase_field is not set"):
        Paraphrased(without, "jsonl")
    path.write_text(json.dumps({"q": "1+1=", "alt": 3, "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match="'alt' must be a string or chat messages"):
        JsonlTask(JsonlParams(**params, paraphrase_field="alt"), seed=0, eval_size=1)


def test_a_task_that_cannot_reword_is_refused_at_start():
    with pytest.raises(ConfigError, match="task 'countdown' has no paraphrase"):
        build_task(load_config(None, ["task.name=countdown", "task.paraphrase=true"]))


def test_the_warm_start_of_reworded_prompts_is_its_own():
    plain, reworded = (load_config(None, [f"task.paraphrase={on}"]) for on in ("false", "true"))
    assert isinstance(build_task(reworded), Paraphrased)
    assert warm_start_key(plain, build_task(plain)) != warm_start_key(
        reworded, build_task(reworded)
    )
