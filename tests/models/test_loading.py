import huggingface_hub.constants
import pytest

from rlvr.models.loading import ModelNotFoundError, load_model, load_tokenizer
from rlvr.models.tiny import build_model, build_tokenizer


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


def test_missing_pad_token_falls_back_to_eos(tmp_path):
    tokenizer = build_tokenizer()
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    loaded = load_tokenizer(str(tmp_path))
    assert loaded.pad_token_id == loaded.eos_token_id
