import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.models.tiny import CHARACTERS, PRESETS, SPECIAL_TOKENS, build_model, build_tokenizer

TEXT = "Hello, world!  347+285=632 #### 632\n\tline two\r\n" + CHARACTERS


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.mark.parametrize(
    "text",
    [
        TEXT,
        " a , b . c n't ",
        "x",
        "\n",
        "\n\n",
        "Question:\n\nAnswer: 4\n\n\n",
    ],
)
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text)
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text


def test_no_unknown_tokens_for_printable_text(tokenizer):
    assert tokenizer.unk_token_id not in tokenizer.encode(TEXT)


def test_special_tokens(tokenizer):
    ids = [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    assert len(set(ids)) == len(SPECIAL_TOKENS)
    named = [
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.unk_token_id,
    ]
    assert len(set(named)) == 4 and None not in named
    assert tokenizer.eos_token == "<|end|>"
    assert tokenizer.encode("<|user|>") == [tokenizer.convert_tokens_to_ids("<|user|>")]
    assert tokenizer.decode(tokenizer.encode("<|bos|>hi"), skip_special_tokens=True) == "hi"


def test_chat_template(tokenizer):
    messages = [{"role": "user", "content": "hi"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|bos|><|user|>hi<|end|><|assistant|>"
    two = messages + [{"role": "assistant", "content": "yo"}]
    assert (
        tokenizer.apply_chat_template(two, tokenize=False)
        == "<|bos|><|user|>hi<|end|><|assistant|>yo<|end|>"
    )


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_build_with_sane_size(tokenizer, preset):
    model = build_model(preset, tokenizer)
    n = sum(p.numel() for p in model.parameters())
    hidden, layers, _, mlp = PRESETS[preset]
    # tied embeddings; per layer q, k, v, o, gate, up, down and two RMSNorms; a final norm
    per_layer = 4 * hidden**2 + 3 * hidden * mlp + 2 * hidden
    assert n == len(tokenizer) * hidden + layers * per_layer + hidden
    assert 0.5e6 <= n <= 30e6  # the long-answer benchmark's medium preset is the largest
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.eos_token_id == tokenizer.eos_token_id


def test_presets_grow():
    tokenizer = build_tokenizer()
    sizes = [
        sum(p.numel() for p in build_model(p, tokenizer).parameters())
        for p in ("nano", "micro", "small")
    ]
    assert sizes == sorted(sizes)


def test_unknown_preset(tokenizer):
    with pytest.raises(ValueError, match="nano"):
        build_model("huge", tokenizer)


def test_same_seed_same_weights(tokenizer):
    a, b = build_model("nano", tokenizer, seed=3), build_model("nano", tokenizer, seed=3)
    c = build_model("nano", tokenizer, seed=4)
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_save_and_load_with_auto_classes(tokenizer, tmp_path):
    model = build_model("nano", tokenizer).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    tok2 = AutoTokenizer.from_pretrained(tmp_path)
    model2 = AutoModelForCausalLM.from_pretrained(tmp_path).eval()

    messages = [{"role": "user", "content": "12+34="}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok2.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == prompt
    ids = tokenizer.encode(prompt + TEXT)
    assert tok2.encode(prompt + TEXT) == ids
    assert tok2.decode(ids) == prompt + TEXT
    assert (tok2.pad_token_id, tok2.eos_token_id, tok2.padding_side) == (
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        "left",
    )
    x = torch.tensor([ids[:64]])
    with torch.no_grad():
        assert torch.equal(model(x).logits, model2(x).logits)


def test_added_tokens_are_one_token_each_and_survive_decoding(tmp_path):
    tokenizer = build_tokenizer(["<Thread>", "</Thread>"])
    assert len(tokenizer) == len(build_tokenizer()) + 2
    text = "<Thread>1: 3*4=12</Thread> <Thread"  # the unfinished tag stays characters
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1 + len("1: 3*4=12") + 1 + len(" <Thread")
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    tokenizer.save_pretrained(tmp_path)
    assert (
        AutoTokenizer.from_pretrained(tmp_path)(text, add_special_tokens=False)["input_ids"] == ids
    )


def test_layers_replaces_the_presets_depth_and_nothing_else(tokenizer):
    one = build_model("nano", tokenizer, seed=0, layers=1)
    hidden, _, heads, mlp = PRESETS["nano"]
    c = one.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (
        1, hidden, heads, mlp,
    )  # fmt: skip
    per_layer = 4 * hidden**2 + 3 * hidden * mlp + 2 * hidden
    n = sum(p.numel() for p in one.parameters())
    assert n == len(tokenizer) * hidden + per_layer + hidden
    # untrained: every matrix as initialised, normal with the config's standard deviation
    q = one.model.layers[0].self_attn.q_proj.weight
    assert float(q.detach().std()) == pytest.approx(c.initializer_range, rel=0.05)
