import json
import math

import pytest

from rlvr.config import load_config
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.replay import ReplayEngine, read_log
from rlvr.rollout.tokens import encode_prompt
from rlvr.train.trainer import Trainer

SAMPLE = SamplingParams(max_new_tokens=20)


def write_log(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def prompt_ids(tokenizer, text):
    return encode_prompt(tokenizer, [{"role": "user", "content": text}])


def test_a_group_gets_distinct_logged_replies_from_a_seeded_offset(tokenizer, tmp_path):
    log = write_log(tmp_path / "log.jsonl", [
        {"prompt": "1+1=", "response": "#### 2"},
        {"prompt": [{"role": "user", "content": "1+1="}], "response": "#### 3"},  # messages too
        {"prompt": "1+1=", "response": "#### 11", "finish_reason": "length"},
        {"prompt": "2+2=", "response": "#### 4"},
    ])  # fmt: skip
    engine = ReplayEngine(log, tokenizer, tokenizer.eos_token_id)
    a, b = prompt_ids(tokenizer, "1+1="), prompt_ids(tokenizer, "2+2=")
    # seed 5 of the group's first prompt: offset 5 % 3 = 2, so replies 2, 0, 1, then 2 again
    out = engine.generate([a, a, b, a, a], SAMPLE, [5, 6, 7, 8, 9])
    assert [c.text for c in out] == ["#### 11", "#### 2", "#### 4", "#### 3", "#### 11"]
    assert [c.finish_reason for c in out] == ["length", "eos", "eos", "eos", "length"]
    eos = tokenizer.eos_token_id
    assert out[1].token_ids == tokenizer("#### 2", add_special_tokens=False)["input_ids"] + [eos]
    assert eos not in out[0].token_ids  # a cut-off reply does not end
    assert all(math.isnan(x) for c in out for x in c.logprobs)
    assert all(len(c.logprobs) == len(c.token_ids) for c in out)
    again = engine.generate([a, a, b, a, a], SAMPLE, [5, 6, 7, 8, 9])
    assert [c.text for c in again] == [c.text for c in out]  # a resume replays the same


def test_a_reply_is_cut_to_the_token_budget(tokenizer, tmp_path):
    log = write_log(tmp_path / "log.jsonl", [{"prompt": "1+1=", "response": "#### 22222"}])
    engine = ReplayEngine(log, tokenizer, tokenizer.eos_token_id)
    (out,) = engine.generate([prompt_ids(tokenizer, "1+1=")], SamplingParams(3), [0])
    assert len(out.token_ids) == 3 and out.finish_reason == "length"
    assert out.text == tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_an_unlogged_prompt_and_a_greedy_call_are_refused(tokenizer, tmp_path):
    log = write_log(tmp_path / "log.jsonl", [{"prompt": "1+1=", "response": "#### 2"}])
    engine = ReplayEngine(log, tokenizer, tokenizer.eos_token_id)
    with pytest.raises(KeyError, match="logs no reply to the prompt.*same task, seed"):
        engine.generate([prompt_ids(tokenizer, "3+3=")], SAMPLE, [0])
    with pytest.raises(ValueError, match="eval decodes live"):
        engine.generate([prompt_ids(tokenizer, "1+1=")], SamplingParams(5, temperature=0.0))


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ('{"prompt": "a", "response": "b"}\n{"prompt": "a", \n', r"line 2: not JSON"),
        ('{"prompt": "a"}\n', r"line 1: .*missing \['response'\]"),
        ('{"prompt": "a", "response": "b"}\n5\n', r"line 2: expected a JSON object.*got int"),
        ("\n\n", "holds no replies"),
    ],
    ids=["missing", "bad-json", "no-response", "not-an-object", "empty"],
)
def test_a_bad_log_is_named_with_its_line(tmp_path, content, message):
    path = tmp_path / "log.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises((FileNotFoundError, ValueError), match=message):
        read_log(str(path))


def test_a_replayed_run_trains_on_exactly_the_logged_replies(fast_overrides, tmp_path):
    """A run logs every reply; a second with the same settings replays that log through soft
    Q-learning: each step sees the same replies of the same problems, and eval still samples."""

    def run(name, *extra):
        overrides = [*fast_overrides, "train.steps=2", "log.samples_per_step=16", *extra]
        trainer = Trainer(load_config(None, [*overrides, f"log.name={name}"]))
        trainer.run()
        return trainer

    def replies(trainer):
        rows = [json.loads(line) for line in trainer.run_dir.samples_file.read_text().splitlines()]
        return sorted((r["step"], r["problem"], r["response"], r["reward"]) for r in rows)

    logged = run("logged")
    replayed = run(
        "replayed", f"rollout.replay={logged.run_dir.samples_file}", "algo.loss=soft_q",
        "algo.advantage=soft_bellman",
    )  # fmt: skip
    assert replies(replayed) == replies(logged)
    assert len(replies(logged)) == 32
    records = replayed.run_dir.read_metrics()
    assert [r["step"] for r in records if "eval/accuracy" in r] == [0, 2]
    assert all("q/abs_error" in r for r in records if "reward" in r)
