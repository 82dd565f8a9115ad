"""The embedded default model: a character-level tokenizer and a tiny Llama, both plain HF objects."""

from __future__ import annotations

import string
from collections.abc import Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<unk>", "<|bos|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHARACTERS = string.printable.replace("\x0b", "").replace("\x0c", "")  # printable ASCII, \t \n \r

# Every message is "<|role|>content<|end|>"; <|end|> doubles as EOS so a reply stops where
# the template would close the assistant turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

CONTEXT = 512  # positions every preset is built with

# name -> (hidden size, layers, heads, MLP size); parameter counts with the ~110-token vocab.
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "nano": (128, 4, 4, 384),  # ~0.8 M
    "micro": (192, 4, 6, 512),  # ~1.8 M
    "small": (256, 6, 8, 768),  # ~4.8 M
    "medium": (384, 8, 6, 1152),  # ~15 M: the long-answer benchmark shape
}


def build_tokenizer(added_tokens: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """Character-level fast tokenizer with pad/bos/eos and a chat template; `added_tokens` (a
    task's markup, such as Parason's tags) become one ordinary token each, kept in decoded text."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(CHARACTERS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(
        Regex(r"[\s\S]"), behavior="isolated"
    )  # "." skips newlines
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|bos|>",
        eos_token="<|end|>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=SPECIAL_TOKENS[4:],
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.add_tokens(list(added_tokens))
    return tokenizer


def build_config(
    preset: str, tokenizer: PreTrainedTokenizerFast, layers: int | None = None
) -> LlamaConfig:
    """The Llama config of the given preset; `layers` (model.layers) replaces its depth."""
    if preset not in PRESETS:
        raise ValueError(
            f"unknown tiny-model preset {preset!r}; choose one of {', '.join(PRESETS)}"
        )
    hidden, depth, heads, mlp = PRESETS[preset]
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers or depth,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=mlp,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def build_model(
    preset: str, tokenizer: PreTrainedTokenizerFast, seed: int = 0, layers: int | None = None
) -> LlamaForCausalLM:
    """A freshly initialised Llama-architecture causal LM of the given preset (and depth)."""
    import torch

    config = build_config(preset, tokenizer, layers)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)
