"""Load any Hugging Face causal LM and its tokenizer (local directory or hub id), with clear errors."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

import huggingface_hub.constants
import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlvr.config import ConfigError

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
POLICY_KEY = "model.name"
HUB_PROBE_SECONDS = 2.0
# Config fields that hold a model's context length, by architecture family.
CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


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


@functools.lru_cache(maxsize=8)
def hub_reachable(endpoint: str, timeout: float = HUB_PROBE_SECONDS) -> bool:
    """Whether `endpoint` (or the proxy the environment sets for it) accepts a TCP connection
    within `timeout` seconds, name lookup included."""
    url = urlparse(endpoint)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_url = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        host, port = proxy_url.hostname, proxy_url.port or 80
    connected: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            connected.append(True)
        except OSError:
            pass

    # A thread bounds the name lookup too, which create_connection's timeout does not.
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(connected)


def _looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1


def local_files_only(name: str) -> bool:
    """True for a hub id while the hub cannot be reached: load it from the local cache alone,
    instead of retrying the network for most of a minute before failing."""
    if Path(name).exists() or _looks_local(name) or huggingface_hub.constants.HF_HUB_OFFLINE:
        return False
    return not hub_reachable(huggingface_hub.constants.ENDPOINT)


def from_pretrained(loader, name: str, key: str = POLICY_KEY, **kwargs):
    """`loader.from_pretrained(name, **kwargs)`, from the local cache alone while the hub cannot
    be reached; ModelNotFoundError with the fix when it fails (`key`: the setting that named it)."""
    cache_only = local_files_only(name)
    # transformers 5.x loads models with hub kernels on, and then fetches them from the hub at
    # every train()/eval() on a GPU: offline that crashes, and online the policy would get
    # numerics its reference and vLLM do not share. Off for the process unless the user chose.
    os.environ.setdefault("USE_HUB_KERNELS", "NO")
    try:
        with offline(cache_only):
            return loader.from_pretrained(name, local_files_only=cache_only, **kwargs)
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(explain_load_error(name, e, key, cache_only)) from e


@contextmanager
def offline(on: bool) -> Iterator[None]:
    """huggingface_hub offline while `on`: transformers looks up some files (a model's adapter
    config) without passing local_files_only, and each such lookup would retry the unreachable
    hub with backoff (about 20 s)."""
    before = huggingface_hub.constants.HF_HUB_OFFLINE
    huggingface_hub.constants.HF_HUB_OFFLINE = before or on
    try:
        yield
    finally:
        huggingface_hub.constants.HF_HUB_OFFLINE = before


def load_tokenizer(
    name: str, trust_remote_code: bool = False, key: str = POLICY_KEY
) -> PreTrainedTokenizerBase:
    """The tokenizer of `name`, left-padding, with a chat template and a pad token (its EOS
    when it has none)."""
    tokenizer = from_pretrained(AutoTokenizer, name, key, trust_remote_code=trust_remote_code)
    if tokenizer.chat_template is None:
        raise ModelNotFoundError(
            f"the tokenizer of {name!r} has no chat template; fix: use an instruct/chat model, "
            "or set `tokenizer.chat_template` and save it into the model directory"
        )
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ModelNotFoundError(
                f"the tokenizer of {name!r} has neither an EOS nor a pad token, so replies "
                "cannot end and batches cannot be padded. Fix: set its EOS token to the token "
                f"that ends an assistant turn and save it: `tok = AutoTokenizer.from_pretrained"
                f"({name!r}); tok.eos_token = '<|im_end|>'` (a token of its vocabulary; "
                "`tok.add_special_tokens({'eos_token': ...})` adds a new one, and then the "
                "model needs `resize_token_embeddings`), `tok.save_pretrained(DIR)`, and set "
                f"{key}=DIR"
            )
        # Pad positions are masked out everywhere, so any token will do; many base models ship
        # without a pad token.
        logger.warning(
            "the tokenizer of %r has no pad token; padding with its EOS token %r",
            name,
            tokenizer.eos_token,
        )
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(
    name: str,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    key: str = POLICY_KEY,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer (unless given one already loaded from `name`); raise
    ModelNotFoundError with a fix when it is missing.

    `key` is the config setting that named the model, so the fix can say what to change."""
    if tokenizer is None:
        tokenizer = load_tokenizer(name, trust_remote_code, key)
    model = from_pretrained(
        AutoModelForCausalLM, name, key, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code
    )
    return model, tokenizer


def load_frozen(
    name: str, key: str, tokenizer: PreTrainedTokenizerBase, device: torch.device | str
) -> PreTrainedModel:
    """A second model that scores or writes the policy's tokens (a teacher, a weak brancher):
    loaded on `device` in eval mode without gradients, refused unless it shares `tokenizer`."""
    model, theirs = load_model(name, key=key)
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(
            f"{key} = {name!r} has another tokenizer than the policy: its token ids would mean "
            "other strings. Fix: a model that shares the policy's tokenizer."
        )
    return model.to(device).eval().requires_grad_(False)


def model_context(
    name: str, tokenizer: PreTrainedTokenizerBase, trust_remote_code: bool = False
) -> int | None:
    """Tokens the model `name` can attend over: the smaller of its config's position limit and
    the tokenizer's model_max_length, where each is set (None when neither is)."""
    config = from_pretrained(AutoConfig, name, trust_remote_code=trust_remote_code)
    text_config = config.get_text_config()
    limits = [getattr(text_config, field, None) for field in CONTEXT_FIELDS]
    # transformers marks an unset model_max_length with a huge sentinel (int(1e30)).
    limits.append(tokenizer.model_max_length)
    real = [n for n in limits if isinstance(n, int) and 0 < n < 10**9]
    return min(real) if real else None


def explain_load_error(
    name: str, error: Exception, key: str = POLICY_KEY, cache_only: bool = False
) -> str:
    """Why the model `name` (from config setting `key`) did not load, and how to fix it;
    `cache_only`: the hub could not be reached, so only the local cache was searched."""
    # Only the policy has an embedded model to fall back on.
    tiny = key == POLICY_KEY
    if Path(name).exists():
        return (
            f"could not load a model from directory {name!r}: {error}. Fix: point {key} at a "
            "directory written by `save_pretrained` (config.json, weights, tokenizer files)."
        )
    if _looks_local(name):
        fallback = f", or use {key}=tiny" if tiny else ""
        return f"model directory {name!r} does not exist. Fix: check the path in {key}{fallback}."
    fallback = f"; or use {key}=tiny for the embedded model" if tiny else ""
    if cache_only:
        where = (
            f"the local cache (the hub at {huggingface_hub.constants.ENDPOINT} could not be "
            f"reached within {HUB_PROBE_SECONDS:g} s)"
        )
    else:
        where = f"the Hugging Face hub or the local cache ({error})"
    return (
        f"could not load {name!r} from {where}. "
        "Fix: check the id for typos; when offline, download it first on a connected machine "
        f"(`hf download {name}`) and set HF_HUB_OFFLINE=1, or pass a local directory{fallback}."
    )
