import copy
import errno
import random

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import ConfigError, LoraSettings
from rlvr.models.lora import apply_lora, trainable_state_dict
from rlvr.train.checkpoint import (
    checkpoint_step,
    complete_checkpoints,
    load_checkpoint,
    remove_incomplete,
    save_checkpoint,
)


def restore(path, model, optimizer, scheduler) -> dict:
    """What a resume does: weights and RNGs by load_checkpoint, the rest by the update group."""
    restored = load_checkpoint(path, model)
    optimizer.load_state_dict(restored.optimizer)
    scheduler.load_state_dict(restored.scheduler)
    return restored.state


def make_state(model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    return optimizer, scheduler


def test_save_load_round_trip_restores_everything(tiny_model, tmp_path):
    import copy

    model = copy.deepcopy(tiny_model)
    optimizer, scheduler = make_state(model)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    scheduler.step()
    torch.manual_seed(123)
    random.seed(5)
    path = save_checkpoint(tmp_path, 7, model, optimizer, scheduler, {"step": 7, "cursor": 112})
    expected_torch, expected_py = torch.rand(3), random.random()

    fresh = copy.deepcopy(tiny_model)
    fresh_opt, fresh_sched = make_state(fresh)
    state = restore(path, fresh, fresh_opt, fresh_sched)
    assert state == {"step": 7, "cursor": 112}
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    assert fresh_sched.last_epoch == 1 and fresh_opt.state_dict()["state"]
    assert torch.equal(torch.rand(3), expected_torch) and random.random() == expected_py


def test_only_complete_checkpoints_count_and_old_ones_are_pruned(tiny_model, tmp_path):
    optimizer, scheduler = make_state(tiny_model)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, tiny_model, optimizer, scheduler, {"step": step}, keep=2)
    (tmp_path / "step-000004").mkdir()  # a crash before the COMPLETE marker
    (tmp_path / ".tmp-step-000005").mkdir()  # a crash mid-write
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step-000002", "step-000003"]


def test_a_failed_save_leaves_the_complete_checkpoints_and_no_partial_copy(
    tiny_model, tmp_path, monkeypatch
):
    optimizer, scheduler = make_state(tiny_model)
    save_checkpoint(tmp_path, 1, tiny_model, optimizer, scheduler, {"step": 1})

    def disk_full(obj, path, *args, **kwargs):
        open(path, "wb").write(b"\0" * 10)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(tmp_path, 2, tiny_model, optimizer, scheduler, {"step": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]
    assert complete_checkpoints(tmp_path) == [tmp_path / "step-000001"]


def test_remove_incomplete_deletes_only_what_a_cut_short_save_left(tiny_model, tmp_path):
    optimizer, scheduler = make_state(tiny_model)
    save_checkpoint(tmp_path, 1, tiny_model, optimizer, scheduler, {"step": 1})
    (tmp_path / "step-000002").mkdir()
    (tmp_path / ".tmp-step-000003").mkdir()
    assert [p.name for p in remove_incomplete(tmp_path)] == [".tmp-step-000003", "step-000002"]
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]
    assert checkpoint_step(tmp_path / "step-000001") == 1


def lora(base, seed=0, **settings):
    torch.manual_seed(seed)  # lora_A's init
    return apply_lora(copy.deepcopy(base), LoraSettings(**{"r": 4, **settings}))


def train_a_step(model, optimizer, scheduler):
    optimizer.zero_grad()
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    scheduler.step()


def test_full_fine_tuning_saves_the_whole_state_dict(tiny_model, tmp_path):
    optimizer, scheduler = make_state(tiny_model)
    path = save_checkpoint(tmp_path, 1, tiny_model, optimizer, scheduler, {"step": 1})
    assert sorted(p.name for p in path.iterdir()) == ["COMPLETE", "model.safetensors", "trainer.pt"]
    assert set(load_file(path / "model.safetensors")) == set(tiny_model.state_dict())


def test_lora_saves_only_the_adapters_and_restores_them_exactly(tiny_model, tmp_path):
    model = lora(tiny_model)
    optimizer, scheduler = make_state(model)
    train_a_step(model, optimizer, scheduler)
    path = save_checkpoint(tmp_path, 3, model, optimizer, scheduler, {"step": 3})
    assert sorted(p.name for p in path.iterdir()) == [
        "COMPLETE",
        "adapter.safetensors",
        "trainer.pt",
    ]
    saved = load_file(path / "adapter.safetensors")
    assert set(saved) == set(trainable_state_dict(model)) and all("lora_" in k for k in saved)

    fresh = lora(tiny_model, seed=1)  # other adapters: the load must replace them
    fresh_opt, fresh_sched = make_state(fresh)
    assert restore(path, fresh, fresh_opt, fresh_sched) == {"step": 3}
    for (name, p), q in zip(model.named_parameters(), fresh.parameters()):
        assert torch.equal(p, q), name
    train_a_step(model, optimizer, scheduler)
    train_a_step(fresh, fresh_opt, fresh_sched)  # the optimizer state came back too
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fresh.parameters()))


@pytest.mark.parametrize(
    ("saved", "loading", "message"),
    [
        ({"r": 4}, {"r": 4, "target_modules": ["q_proj"]}, "does not fit this model's adapters"),
        ({"r": 4}, {"r": 8}, "has shape"),
        (None, {"r": 4}, "holds full model weights"),
        ({"r": 4}, None, "holds only LoRA adapters"),
    ],
)
def test_resuming_with_other_lora_settings_says_so(tiny_model, tmp_path, saved, loading, message):
    model = lora(tiny_model, **saved) if saved else copy.deepcopy(tiny_model)
    path = save_checkpoint(tmp_path, 1, model, *make_state(model), {"step": 1})
    other = lora(tiny_model, **loading) if loading else copy.deepcopy(tiny_model)
    with pytest.raises(ConfigError, match=message) as e:
        load_checkpoint(path, other)
    assert "fix: resume with the" in str(e.value)
