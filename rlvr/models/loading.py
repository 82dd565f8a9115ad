"""Load any Hugging Face causal LM and its tokenizer (local directory or hub id), with clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
POLICY_KEY = "model.name"


class LoadSettings(BaseModel):
    """How a helper model (reward model, judge) is loaded; their Params extend this."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Parameter dtype of the model."
    )
    device: str = Field(
        "auto",
        description="Torch device: 'auto' (CUDA when available, else CPU), 'cpu', 'cuda:1', ...",
    )
    trust_remote_code: bool = Field(
        False, description="Allow hub models that ship their own modelling code."
    )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class ModelNotFoundError(RuntimeError):
    """The model id or directory could not be loaded; the message says why and how to fix it."""


def load_tokenizer(
    name: str, trust_remote_code: bool = False, key: str = POLICY_KEY
) -> PreTrainedTokenizerBase:
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(explain_load_error(name, e, key)) from e
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
    name: str, dtype: str = "float32", trust_remote_code: bool = False, key: str = POLICY_KEY
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer; raise ModelNotFoundError with a fix when it is missing.

    `key` is the config setting that named the model, so the fix can say what to change."""
    tokenizer = load_tokenizer(name, trust_remote_code, key)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(explain_load_error(name, e, key)) from e
    return model, tokenizer


def explain_load_error(name: str, error: Exception, key: str = POLICY_KEY) -> str:
    """Why the model `name` (from config setting `key`) did not load, and how to fix it."""
    # Only the policy has an embedded model to fall back on.
    tiny = key == POLICY_KEY
    if Path(name).exists():
        return (
            f"could not load a model from directory {name!r}: {error}. Fix: point {key} at a "
            "directory written by `save_pretrained` (config.json, weights, tokenizer files)."
        )
    looks_local = name.startswith((".", "/", "~")) or name.count("/") > 1
    if looks_local:
        fallback = f", or use {key}=tiny" if tiny else ""
        return f"model directory {name!r} does not exist. Fix: check the path in {key}{fallback}."
    fallback = f"; or use {key}=tiny for the embedded model" if tiny else ""
    return (
        f"could not load {name!r} from the Hugging Face hub or the local cache ({error}). "
        "Fix: check the id for typos; when offline, download it first on a connected machine "
        f"(`hf download {name}`) and set HF_HUB_OFFLINE=1, or pass a local directory{fallback}."
    )
