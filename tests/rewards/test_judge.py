import re
from concurrent.futures import ThreadPoolExecutor

import huggingface_hub.constants
import pydantic
import pytest

from rlvr.models.loading import ModelNotFoundError
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.rewards import REWARDS
from rlvr.rewards.judge import DEFAULT_RUBRIC, HFJudge, LLMJudge, parse_judge_score
from rlvr.rollout.engine import Completion
from rlvr.types import Problem

# (judge reply, rubric scale, normalised score or None when unusable)
GOLDEN = [
    ("Score: 7/10", 10, 0.7),
    ("score:7", 10, 0.7),
    ("The response is right.\n\n**Score:** 8", 10, 0.8),
    ("**Score**: 9/10", 10, 0.9),
    ("Final score = 6 / 10", 10, 0.6),
    ("My rating is 3", 5, 0.6),
    ("a score of 2 out of 4", 4, 0.5),
    ("Rating: 4 out of 5", 5, 0.8),
    ("Rating (1-5): 4", 5, 0.8),
    ("Grade: 10/10", 10, 1.0),
    ("10/10", 10, 1.0),
    ("[[8]]", 10, 0.8),
    ("Explanation ... [[ 2.5 ]]", 5, 0.5),
    ("[[8/10]]", 10, 0.8),
    ("Score: 7.5/10", 10, 0.75),
    ("Score: 0/10. Nothing is right.", 10, 0.0),
    ("0.85", 1, 0.85),
    # multiple numbers: the verdict, not the arithmetic around it
    ("3 of the 4 steps are right and 12 is wrong. Score: 6/10", 10, 0.6),
    ("Score: 4/10 at first, but on reflection Score: 7/10", 10, 0.7),
    ("The answer 42 is right. [[9]] Score: 3", 10, 0.9),
    ("3/4 of the steps hold, so I give it 7.", 10, 0.7),
    ("I'd rate this response 7 out of 10.", 10, 0.7),
    ("On a 1-5 scale I give it a 4", 5, 0.8),
    ("It computes 12 * 3 = 36 correctly. 8", 10, 0.8),
    # unusable: none, out of range, negative, another scale, an echoed template
    ("I cannot evaluate this response.", 10, None),
    ("", 10, None),
    ("Score: 12/10", 10, None),
    ("Score: 11", 10, None),
    ("Score: -3", 10, None),
    ("[[-1]]", 10, None),
    ("Score: 4/5", 10, None),
    ("Rating: 8 out of 10", 5, None),
    ("Score: N/10", 10, None),
    ("The answer 42 is correct.", 10, None),
    ("Score: seven", 10, None),
]


@pytest.mark.parametrize("text, scale, expected", GOLDEN)
def test_parse_judge_score(text, scale, expected):
    got = parse_judge_score(text, scale)
    assert got == (None if expected is None else pytest.approx(expected)), text


class ScriptedEngine:
    """An Engine that answers each prompt with `reply(prompt_text)` and records every call."""

    def __init__(self, tokenizer, reply, finish_reason="eos"):
        self.tokenizer, self.reply, self.finish_reason = tokenizer, reply, finish_reason
        self.calls = []

    def generate(self, prompts, params, seeds=None):
        texts = [self.tokenizer.decode(p) for p in prompts]
        self.calls.append((texts, params))
        return [Completion([], [], self.finish_reason, self.reply(t)) for t in texts]

    def load_weights(self, state_dict):
        return None


def user_text(prompt):
    """What the judge was asked: the user turn of the tiny chat template."""
    return re.fullmatch(r"<\|bos\|><\|user\|>(.*)<\|end\|><\|assistant\|>", prompt, re.S)[1]


def make_judge(engine, tokenizer, rubric="Q={question}|R={response}|A={reference}|S={scale}"):
    return LLMJudge(engine, tokenizer, rubric, scale=10, max_new_tokens=32, batch_size=4)


def test_the_rubric_is_filled_and_sent_as_a_greedy_chat_prompt(tokenizer):
    engine = ScriptedEngine(tokenizer, lambda prompt: "Score: 8/10")
    judge = make_judge(engine, tokenizer)
    problems = [
        Problem("a", "2+2?", answer="4"),
        Problem("b", [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"}]),
    ]
    judge.score_batch(problems, ["four", "Hello {there}"])
    [(texts, params)] = engine.calls
    assert texts == [
        "<|bos|><|user|>Q=2+2?|R=four|A=4|S=10<|end|><|assistant|>",
        "<|bos|><|user|>Q=Sys\n\nHi|R=Hello {there}|A=(none given)|S=10<|end|><|assistant|>",
    ]
    assert params.temperature == 0 and params.max_new_tokens == 32


def test_judge_replies_map_to_scores(tokenizer):
    replies = {"good": "Fine work. Score: 9/10", "bad": "[[2]]", "junk": "I like turtles"}
    engine = ScriptedEngine(tokenizer, lambda prompt: replies[user_text(prompt)])
    judge = make_judge(engine, tokenizer, rubric="{response}")
    problem = Problem("p", "question")
    good, bad, junk = judge.score_batch([problem] * 3, ["good", "bad", "junk"])
    assert (good.value, good.status) == (pytest.approx(0.9), "ok")
    assert (bad.value, bad.status) == (pytest.approx(0.2), "ok")
    assert (junk.value, junk.status) == (0.0, "infra_error")
    assert junk.info["judge_output"] == "I like turtles" and "no score" in junk.info["error"]


def test_a_reply_cut_short_says_so(tokenizer):
    engine = ScriptedEngine(tokenizer, lambda prompt: "Let me think about", finish_reason="length")
    score = make_judge(engine, tokenizer)(Problem("p", "q"), "r")
    assert score.status == "infra_error" and "max_new_tokens=32" in score.info["error"]


def test_concurrent_calls_become_one_engine_call_per_batch(tokenizer):
    # The judge gives each response its own digit back, so a mix-up would show.
    engine = ScriptedEngine(tokenizer, lambda prompt: f"Score: {user_text(prompt)}/10")
    judge = make_judge(engine, tokenizer, rubric="{response}")
    responses = [str(i) for i in range(10)]
    with ThreadPoolExecutor(len(responses)) as pool:
        scores = list(pool.map(judge, [Problem("p", "q")] * 10, responses, timeout=30))
    assert [s.value for s in scores] == pytest.approx([i / 10 for i in range(10)])
    sizes = [len(texts) for texts, _ in engine.calls]
    assert sum(sizes) == 10 and max(sizes) <= 4 and len(sizes) < 10


def test_the_default_rubric_fills_in_and_asks_for_the_scale():
    params = HFJudge.Params(model="any", scale=5)
    text = params.rubric.format(question="Q", response="R", reference="A", scale="5")
    assert params.rubric == DEFAULT_RUBRIC and '"Score: N/5"' in text
    assert "{" not in text and "}" not in text


@pytest.mark.parametrize(
    "rubric, problem",
    [("Grade {answer}", "unknown rubric fields ['answer']"), ("Rate {question}", "never shows")],
)
def test_a_bad_rubric_is_rejected_when_configured(rubric, problem):
    with pytest.raises(pydantic.ValidationError, match=re.escape(problem)):
        HFJudge.Params(model="any", rubric=rubric)


def test_params_are_strict_and_documented():
    with pytest.raises(pydantic.ValidationError):
        HFJudge.Params(model="any", temperature=0.7)
    assert all(f.description for f in HFJudge.Params.model_fields.values())


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_a_tiny_random_judge_gives_infra_errors_one_engine_call_per_batch(tmp_path, offline):
    tokenizer = build_tokenizer()
    build_model("nano", tokenizer, seed=0).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    judge = HFJudge(
        HFJudge.Params(
            model=str(tmp_path),
            rubric="Rate {response} for {question}. Score:",
            max_new_tokens=6,
            batch_size=4,
            device="cpu",
        )
    )
    calls = []
    generate = judge.engine.generate
    judge.engine.generate = lambda prompts, *a, **k: (
        calls.append(len(prompts)) or generate(prompts, *a, **k)
    )
    problems, responses = [Problem(str(i), f"{i}+{i}=") for i in range(6)], ["4", "x"] * 3
    direct = judge.score_batch(problems[:4], responses[:4])
    assert calls == [4]
    with ThreadPoolExecutor(6) as pool:
        batched = list(pool.map(judge, problems, responses, timeout=60))
    assert sum(calls[1:]) == 6 and max(calls[1:]) <= 4
    for score in direct + batched:  # an untrained model writes no score
        assert score.status == "infra_error" and "judge_output" in score.info


def test_a_missing_judge_model_says_how_to_fix_it(tmp_path, offline):
    with pytest.raises(
        ModelNotFoundError, match="check the path in task.reward_params.judge.model"
    ) as e:
        HFJudge(HFJudge.Params(model=str(tmp_path / "no" / "such-judge")))
    assert "=tiny" not in str(e.value)


def test_registered_with_a_one_line_doc():
    assert REWARDS["judge"] is HFJudge
    assert HFJudge.__doc__ and "\n" not in HFJudge.__doc__.strip()
