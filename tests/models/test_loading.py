import logging
import os
import shutil
import socket
from pathlib import Path

import huggingface_hub.constants
import pytest

from rlvr.config import load_config
from rlvr.models.loading import (
    ModelNotFoundError,
    hub_reachable,
    load_model,
    load_tokenizer,
    model_context,
)
from rlvr.models.tiny import CONTEXT, build_model, build_tokenizer
from rlvr.train.trainer import Trainer


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import time


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tokenizer = build_tokenizer()
    build_model("nano", tokenizer).save_pretrained(path)
    tokenizer.padding_side = "right"
    tokenizer.save_pretrained(path)
    return path


def test_missing_local_directory(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_model(str(tmp_path / "no" / "such-model"))


def test_hub_id_offline_gives_advice():
    with pytest.raises(ModelNotFoundError) as e:
        load_model("nobody-at-all/no-such-model-xyz")
    msg = str(e.value)
    assert "nobody-at-all/no-such-model-xyz" in msg
    assert "HF_HUB_OFFLINE" in msg and "hf download" in msg and "model.name=tiny" in msg


def test_directory_without_model(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(ModelNotFoundError, match="save_pretrained"):
        load_model(str(tmp_path))


def test_loads_saved_tiny_model(saved):
    model, tokenizer = load_model(str(saved))
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token_id is not None
    assert model.config.vocab_size == len(tokenizer)
    assert next(model.parameters()).dtype.is_floating_point


def test_dtype(saved):
    import torch

    model, _ = load_model(str(saved), dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16


def test_missing_chat_template(tmp_path):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ModelNotFoundError, match="chat template"):
        load_tokenizer(str(tmp_path))


def test_missing_pad_token_falls_back_to_eos_and_says_so(tmp_path, caplog):
    tokenizer = build_tokenizer()
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rlvr.models.loading"):
        loaded = load_tokenizer(str(tmp_path))
    assert loaded.pad_token_id == loaded.eos_token_id
    assert [r.getMessage() for r in caplog.records] == [
        f"the tokenizer of {str(tmp_path)!r} has no pad token; padding with its EOS token '<|end|>'"
    ]


@pytest.fixture
def no_eos_or_pad(saved, tmp_path):
    """The saved tiny model with a tokenizer that has neither an EOS nor a pad token."""
    path = tmp_path / "no-eos"
    shutil.copytree(saved, path)
    tokenizer = build_tokenizer()
    tokenizer.eos_token = tokenizer.pad_token = None
    tokenizer.save_pretrained(path)
    return path


def test_tokenizer_without_eos_or_pad_says_which_token_to_set(no_eos_or_pad):
    with pytest.raises(ModelNotFoundError) as error:
        load_tokenizer(str(no_eos_or_pad))
    message = str(error.value)
    assert f"the tokenizer of {str(no_eos_or_pad)!r} has neither an EOS nor a pad token" in message
    assert "tok.eos_token = '<|im_end|>'" in message and "tok.save_pretrained(DIR)" in message
    assert "set model.name=DIR" in message


def test_a_run_whose_tokenizer_fails_writes_no_run_directory(no_eos_or_pad, tmp_path):
    runs = tmp_path / "runs"
    cfg = load_config(
        None, [f"model.name={no_eos_or_pad}", f"log.run_dir={runs}", "log.quiet=true"]
    )
    with pytest.raises(ModelNotFoundError, match="neither an EOS nor a pad token"):
        Trainer(cfg)
    assert not runs.exists()


def test_context_is_the_config_position_limit_or_the_tokenizers_if_smaller(saved, tmp_path):
    tokenizer = load_tokenizer(str(saved))
    assert model_context(str(saved), tokenizer) == CONTEXT
    tokenizer.model_max_length = 100
    assert model_context(str(saved), tokenizer) == 100
    tokenizer.model_max_length = int(1e30)  # transformers' "unset"
    assert model_context(str(saved), tokenizer) == CONTEXT


@pytest.fixture
def unreachable_hub(monkeypatch, tmp_path):
    """Online mode, an empty local cache, and a hub endpoint that refuses connections."""
    with socket.socket() as probe:  # a free port: nothing listens on it once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return huggingface_hub.constants.ENDPOINT


def test_hub_reachable_probes_the_endpoint(unreachable_hub):
    assert not hub_reachable(unreachable_hub)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert hub_reachable(f"http://127.0.0.1:{server.getsockname()[1]}")


def test_unreachable_hub_fails_from_the_cache_with_advice(unreachable_hub):
    with pytest.raises(ModelNotFoundError) as error:
        load_model("nobody-at-all/no-such-model-xyz")
    message = str(error.value)
    assert (
        "could not load 'nobody-at-all/no-such-model-xyz' from the local cache (the hub at "
        f"{unreachable_hub} could not be reached within 2 s)"
    ) in message
    assert "hf download nobody-at-all/no-such-model-xyz" in message and "model.name=tiny" in message


def test_unreachable_hub_still_loads_a_cached_model(unreachable_hub, saved):
    # The layout huggingface_hub writes: refs/main names the snapshot holding the files.
    repo = huggingface_hub.constants.HF_HUB_CACHE + "/models--someone--tiny-chat"
    revision = "0" * 40
    shutil.copytree(saved, f"{repo}/snapshots/{revision}")
    (Path(repo) / "refs").mkdir()
    (Path(repo) / "refs" / "main").write_text(revision)
    model, tokenizer = load_model("someone/tiny-chat")
    assert model.config.vocab_size == len(tokenizer) and tokenizer.chat_template


def test_hub_kernels_stay_off_unless_the_user_asks(saved, monkeypatch):
    # transformers 5.x turns them on by default and fetches them at train() on a GPU
    monkeypatch.delenv("USE_HUB_KERNELS", raising=False)
    model, _ = load_model(str(saved))
    assert not getattr(model, "use_kernels", False)
    monkeypatch.setenv("USE_HUB_KERNELS", "1")
    load_model(str(saved))
    assert os.environ["USE_HUB_KERNELS"] == "1"  # the user's choice stands
