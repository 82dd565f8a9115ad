"""Load any Hugging Face causal LM and its tokenizer (local directory or hub id), with clear errors."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelNotFoundError(RuntimeError):
    """The model id or directory could not be loaded; the message says why and how to fix it."""


def load_tokenizer(name: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(_explain(name, e)) from e
    if tokenizer.chat_template is None:
        raise ModelNotFoundError(
            f"the tokenizer of {name!r} has no chat template; fix: use an instruct/chat model, "
            "or set `tokenizer.chat_template` and save it into the model directory"
        )
    if tokenizer.pad_token_id is None:  # many base models ship without one; EOS is safe under masks
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(
    name: str, dtype: str = "float32", trust_remote_code: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer; raise ModelNotFoundError with a fix when it is missing."""
    tokenizer = load_tokenizer(name, trust_remote_code)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(_explain(name, e)) from e
    return model, tokenizer


def _explain(name: str, error: Exception) -> str:
    if Path(name).exists():
        return (
            f"could not load a model from directory {name!r}: {error}. Fix: point model.name at a "
            "directory written by `save_pretrained` (config.json, weights, tokenizer files)."
        )
    looks_local = name.startswith((".", "/", "~")) or name.count("/") > 1
    if looks_local:
        return (
            f"model directory {name!r} does not exist. Fix: check the path, or use model.name=tiny."
        )
    return (
        f"could not load {name!r} from the Hugging Face hub or the local cache ({error}). "
        "Fix: check the id for typos; when offline, download it first on a connected machine "
        f"(`hf download {name}`) and set HF_HUB_OFFLINE=1, or pass a local directory; "
        "or use model.name=tiny for the embedded model."
    )
