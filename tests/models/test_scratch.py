import json
import random
import string

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

from rlvr.models.loading import load_model
from rlvr.models.scratch import (
    DEFAULT_SYSTEM,
    PRESETS,
    build_config,
    build_scratch_model,
    default_corpus,
    main,
    parameter_count,
    train_bpe_tokenizer,
)
from rlvr.rollout.tokens import renders_tools


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(default_corpus())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_scratch_model(tmp_path_factory.mktemp("scratch") / "qwen2-test")


@pytest.fixture(scope="module")
def loaded(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)


def random_ascii(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.printable) for _ in range(n))


def weights(directory) -> dict[str, torch.Tensor]:
    return load_file(directory / "model.safetensors")


def test_directory_is_a_standard_qwen2_checkpoint(model_dir):
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["model_type"] == "qwen2"
    assert config["torch_dtype"] == config["dtype"] == "float32"
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    # Inline, as in Qwen2.5's own files, for readers that do not look for chat_template.jinja.
    assert "<|im_start|>assistant" in tokenizer_config["chat_template"]
    assert tokenizer_config["tokenizer_class"] == "Qwen2Tokenizer"
    assert (model_dir / "tokenizer.json").exists()
    assert (model_dir / "model.safetensors").exists()


def test_reloads_with_auto_classes(tokenizer, loaded):
    model, reloaded = loaded
    assert isinstance(model, Qwen2ForCausalLM)
    text = "Make 46 from 3 7 25 <tool_call>{}</tool_call><|im_end|>\n" + random_ascii(0, 200)
    assert reloaded.encode(text) == tokenizer.encode(text)
    assert reloaded.chat_template == tokenizer.chat_template
    assert len(reloaded) == len(tokenizer) == model.config.vocab_size
    with torch.no_grad():
        logits = model(torch.tensor([reloaded.encode("347+285=")])).logits
    assert logits.shape == (1, 8, model.config.vocab_size)  # one token per character


def test_loads_with_rlvr(model_dir, loaded):
    model, tokenizer = load_model(str(model_dir))
    assert isinstance(model, Qwen2ForCausalLM)
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token == "<|endoftext|>"
    reference = loaded[0].state_dict()
    assert all(torch.equal(t, reference[k]) for k, t in model.state_dict().items())


def test_chat_template_system_user(loaded):
    tokenizer = loaded[1]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "347+285="},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n347+285=<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")  # no BOS is prepended
    assert tokenizer.decode(ids) == text


def test_chat_template_default_system_and_reply(loaded):
    tokenizer = loaded[1]
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
    )


def test_chat_template_renders_tools(loaded):
    tokenizer = loaded[1]
    tool = {
        "type": "function",
        "function": {"name": "search", "description": "Search.", "parameters": {}},
    }
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=[tool], tokenize=False
    )
    assert "# Tools" in text and '"name": "search"' in text
    assert renders_tools(tokenizer)


@pytest.mark.parametrize(
    "text",
    [
        string.printable,
        random_ascii(1, 500),
        random_ascii(2, 500),
        "  leading and trailing spaces  ",
        "\n\n\tindented\r\n",
        "Question:\n\nAnswer: 4\n\n\n",
        " a , b . c n't ",
        "x",
        "caf\u00e9 \u00fcber \u65e5\u672c \U0001f600",  # NFC text outside ASCII survives too
    ],
)
def test_round_trip(loaded, text):
    tokenizer = loaded[1]
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_digits_are_single_tokens(loaded):
    tokenizer = loaded[1]
    for digit in string.digits:
        (token,) = tokenizer.encode(digit)
        assert tokenizer.decode([token]) == digit
    tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode("1234567890"))
    assert tokens == list("1234567890")
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("347+285")) == list("347+285")


def test_special_tokens_as_in_qwen2_instruct(loaded):
    model, tokenizer = loaded
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    endoftext = tokenizer.convert_tokens_to_ids("<|im_start|>") - 1
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == im_end
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.pad_token_id == endoftext
    assert tokenizer.bos_token is None and tokenizer.unk_token is None
    assert model.config.eos_token_id == im_end
    assert model.generation_config.eos_token_id == [im_end, endoftext]
    # Special tokens sit after the trained vocabulary, as in Qwen2: pad is not id 0.
    assert endoftext == len(tokenizer) - 5
    assert tokenizer.encode("<|im_start|>user") == [endoftext + 1, *tokenizer.encode("user")]
    assert tokenizer.decode(tokenizer.encode("<|im_end|>hi"), skip_special_tokens=True) == "hi"
    # Tool-call tags are whole tokens that survive skip_special_tokens.
    call = tokenizer.encode("<tool_call>x</tool_call>")
    assert len(call) == 3
    assert tokenizer.decode(call, skip_special_tokens=True) == "<tool_call>x</tool_call>"


def test_tokenizer_is_small_and_fast_to_train():
    import time

    corpus = default_corpus()
    start = time.perf_counter()
    tokenizer = train_bpe_tokenizer(corpus, vocab_size=2048)
    assert time.perf_counter() - start < 5
    assert len(tokenizer) == 2048
    # Words of the chat template and of the tasks' prompts are whole tokens.
    for word in ["system", "user", "assistant", "Make", " from", " left", " take", " founded"]:
        assert len(tokenizer.encode(word)) == 1, word


def test_test_preset_parameter_count(loaded):
    model = loaded[0]
    h, layers, vocab, mlp = 64, 2, model.config.vocab_size, 128
    kv = h // 2  # one KV head of size 32
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * mlp + 2 * h
    expected = vocab * h + layers * layer + h  # tied embeddings, final norm
    assert sum(p.numel() for p in model.parameters()) == expected == 336_448
    assert parameter_count(model.config) == expected


def test_same_seed_same_weights(model_dir, tmp_path):
    again = build_scratch_model(tmp_path / "again", seed=0)
    other = build_scratch_model(tmp_path / "other", seed=1)
    reference, same, different = weights(model_dir), weights(again), weights(other)
    assert reference.keys() == same.keys() == different.keys()
    assert all(torch.equal(reference[k], same[k]) for k in reference)
    projections = [k for k in reference if k.endswith("proj.weight")]
    assert not any(torch.equal(reference[k], different[k]) for k in projections)
    # The tokenizer does not depend on the seed.
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        assert (model_dir / name).read_text() == (other / name).read_text()


def test_cli_bfloat16_is_the_float32_model_rounded(model_dir, tmp_path, capsys):
    main([str(tmp_path / "bf16"), "--dtype", "bfloat16", "--seed", "0"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"dir": str((tmp_path / "bf16").resolve()), "parameters": 336_448}
    config = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert config["torch_dtype"] == config["dtype"] == "bfloat16"
    reference, rounded = weights(model_dir), weights(tmp_path / "bf16")
    assert all(torch.equal(reference[k].to(torch.bfloat16), rounded[k]) for k in reference)
    model, _ = load_model(str(tmp_path / "bf16"), dtype="bfloat16")
    assert model.dtype == torch.bfloat16


def test_qwen2_05b_preset_matches_the_real_shape(tokenizer):
    config = build_config("qwen2-0.5b", tokenizer)
    assert config.vocab_size == 151_936 and config.tie_word_embeddings
    n = parameter_count(config)
    assert abs(n - 494e6) / 494e6 < 0.02
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    assert sum(p.numel() for p in model.parameters()) == n == 494_032_768


def test_presets_grow(tokenizer):
    sizes = [parameter_count(build_config(p, tokenizer)) for p in PRESETS]
    assert sizes == sorted(sizes)
    assert 250e6 < parameter_count(build_config("qwen2-300m", tokenizer)) < 350e6


def test_unknown_preset(tokenizer):
    with pytest.raises(ValueError, match="qwen2-test"):
        build_config("qwen2-7b", tokenizer)
