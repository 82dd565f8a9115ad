import math
from concurrent.futures import ThreadPoolExecutor

import huggingface_hub.constants
import pydantic
import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2ForSequenceClassification,
    LlamaConfig,
    LlamaForSequenceClassification,
)

from rlvr.models.loading import ModelNotFoundError
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.rewards import REWARDS
from rlvr.rewards.reward_model import RewardModel
from rlvr.types import Problem

PROBLEMS = [
    Problem("short", "1+1="),
    Problem("long", "What is 123 + 456? Answer with the number only, please."),
    Problem(
        "chat", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    ),
]
RESPONSES = ["2", "The answer is 579, which I checked twice.", "Hello!"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def save_reward_model(path, padding_side="left", chat_template=True, arch="llama"):
    tokenizer = build_tokenizer()
    shared = dict(
        vocab_size=len(tokenizer),
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    if arch == "llama":  # rotary positions: left padding shifts nothing that matters
        config = LlamaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=64,
            max_position_embeddings=256,
            **shared,
        )
        model = LlamaForSequenceClassification(config).eval()
    else:  # learned absolute positions: left padding needs explicit position ids
        config = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=256, **shared)
        model = GPT2ForSequenceClassification(config).eval()
    torch.nn.init.normal_(model.score.weight, std=1.0)  # logits of order 1, not 0.01
    model.save_pretrained(path)
    tokenizer.padding_side = padding_side
    if not chat_template:
        tokenizer.chat_template = None
    tokenizer.save_pretrained(path)
    return model, tokenizer


def unbatched_logits(model, encodings):
    with torch.no_grad():
        return [model(**e).logits[0, 0].item() for e in encodings]


@pytest.mark.parametrize(
    "arch, padding_side",
    [("llama", "left"), ("llama", "right"), ("gpt2", "left"), ("gpt2", "right")],
)
def test_batched_scores_equal_one_at_a_time_logits(tmp_path, arch, padding_side):
    model, tokenizer = save_reward_model(tmp_path, padding_side, arch=arch)
    rm = RewardModel(RewardModel.Params(model=str(tmp_path), device="cpu"))
    texts = [
        tokenizer.apply_chat_template(
            p.messages() + [{"role": "assistant", "content": r}], tokenize=False
        )
        for p, r in zip(PROBLEMS, RESPONSES)
    ]
    expected = unbatched_logits(
        model, [tokenizer(t, add_special_tokens=False, return_tensors="pt") for t in texts]
    )
    scores = rm.score_batch(PROBLEMS, RESPONSES)
    assert [s.status for s in scores] == ["ok"] * 3
    assert [s.value for s in scores] == pytest.approx(expected, abs=1e-5)
    assert [s.info["logit"] for s in scores] == pytest.approx(expected, abs=1e-5)
    assert max(expected) - min(expected) > 1e-2  # the comparison can tell the rows apart


def test_without_a_chat_template_prompt_and_response_are_a_text_pair(tmp_path):
    model, tokenizer = save_reward_model(tmp_path, "right", chat_template=False)
    rm = RewardModel(RewardModel.Params(model=str(tmp_path), device="cpu"))
    prompts = ["\n\n".join(m["content"] for m in p.messages()) for p in PROBLEMS]
    expected = unbatched_logits(
        model, [tokenizer(p, r, return_tensors="pt") for p, r in zip(prompts, RESPONSES)]
    )
    assert [s.value for s in rm.score_batch(PROBLEMS, RESPONSES)] == pytest.approx(
        expected, abs=1e-5
    )


def test_concurrent_calls_are_batched_into_few_forward_passes(tmp_path):
    save_reward_model(tmp_path)
    rm = RewardModel(RewardModel.Params(model=str(tmp_path), batch_size=4, device="cpu"))
    forwards = []
    rm.model.register_forward_hook(lambda module, args, out: forwards.append(len(out.logits)))
    problems, responses = PROBLEMS * 4, RESPONSES * 4
    direct = [s.value for s in rm.score_batch(problems, responses)]
    assert forwards == [4, 4, 4]  # the direct path chunks by batch_size too
    forwards.clear()
    with ThreadPoolExecutor(len(problems)) as pool:
        called = list(pool.map(rm, problems, responses, timeout=30))
    assert [s.value for s in called] == pytest.approx(direct, abs=1e-5)
    assert sum(forwards) == len(problems) and max(forwards) <= 4 and len(forwards) < 12


def test_scale_shift_and_sigmoid(tmp_path):
    save_reward_model(tmp_path)
    raw = RewardModel(RewardModel.Params(model=str(tmp_path), device="cpu"))
    squashed = RewardModel(
        RewardModel.Params(model=str(tmp_path), scale=2.0, shift=-1.0, sigmoid=True, device="cpu")
    )
    for plain, scaled in zip(
        raw.score_batch(PROBLEMS, RESPONSES), squashed.score_batch(PROBLEMS, RESPONSES)
    ):
        assert scaled.value == pytest.approx(1 / (1 + math.exp(-(2 * plain.value - 1))), abs=1e-6)
        assert scaled.info["logit"] == pytest.approx(plain.value, abs=1e-6)


def test_a_non_finite_score_is_a_crash(tmp_path):
    save_reward_model(tmp_path)
    rm = RewardModel(RewardModel.Params(model=str(tmp_path), device="cpu"))
    with torch.no_grad():
        rm.model.score.weight.fill_(float("nan"))
    score = rm(PROBLEMS[0], RESPONSES[0])
    assert (score.value, score.status) == (0.0, "crash")
    assert "nan" in score.info["error"]


def test_a_missing_model_says_how_to_fix_it(tmp_path):
    with pytest.raises(
        ModelNotFoundError,
        match="does not exist. Fix: check the path in task.reward_params.reward_model.model",
    ) as e:
        RewardModel(RewardModel.Params(model=str(tmp_path / "no" / "such-rm")))
    assert "=tiny" not in str(e.value)
    with pytest.raises(ModelNotFoundError) as e:
        RewardModel(RewardModel.Params(model="nobody-at-all/no-such-rm-xyz"))
    assert "hf download nobody-at-all/no-such-rm-xyz" in str(e.value)
    assert "=tiny" not in str(e.value)  # only the policy has an embedded model


def test_a_causal_lm_is_not_mistaken_for_a_reward_model(tmp_path):
    tokenizer = build_tokenizer()
    build_model("nano", tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ModelNotFoundError, match="not a reward model.*score.weight"):
        RewardModel(RewardModel.Params(model=str(tmp_path)))


def test_params_are_strict_and_documented():
    with pytest.raises(pydantic.ValidationError):
        RewardModel.Params(model="x", temperature=1.0)
    assert all(f.description for f in RewardModel.Params.model_fields.values())


def test_registered_with_a_one_line_doc():
    assert REWARDS["reward_model"] is RewardModel
    assert RewardModel.__doc__ and "\n" not in RewardModel.__doc__.strip()
