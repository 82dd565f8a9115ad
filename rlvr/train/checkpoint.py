"""Crash-safe checkpoints: written to a temporary directory, fsynced, renamed, marked complete last.

Full fine-tuning saves the whole model (`model.safetensors`); a LoRA policy saves only what
trains (`adapter.safetensors`), since its frozen base is reloaded from model.name.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rlvr.config import ConfigError
from rlvr.models.lora import is_lora, trainable_state_dict

COMPLETE = "COMPLETE"
MODEL_FILE = "model.safetensors"  # full fine-tuning: the whole state dict
ADAPTER_FILE = "adapter.safetensors"  # LoRA: the trainable (adapter) parameters only


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _fsync_tree(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    directory: Path, step: int, model, optimizer, scheduler, state: dict[str, Any], keep: int = 2
) -> Path:
    """Write checkpoint `step-<step>` under `directory`; the COMPLETE marker is the last write."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step:06d}"
    tmp = directory / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        lora = is_lora(model)
        weights = trainable_state_dict(model) if lora else model.state_dict()
        # clone: tied embeddings share storage, which safetensors refuses to write twice
        save_file(
            {k: v.detach().cpu().clone() for k, v in weights.items()},
            tmp / (ADAPTER_FILE if lora else MODEL_FILE),
        )
        torch.save(
            {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "state": state,
                "rng": rng_state(),
            },
            tmp / "trainer.pt",
        )
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written copy only takes the space
        raise
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    (final / COMPLETE).write_text(str(step))
    _fsync_tree(final)
    for old in sorted(complete_checkpoints(directory))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete_checkpoints(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("step-*") if (p / COMPLETE).is_file())


def remove_incomplete(directory: Path) -> list[Path]:
    """Delete what a save cut short (a kill, a full disk) left behind: temporary directories and
    renamed ones without the COMPLETE marker. Returns what was removed."""
    if not directory.is_dir():
        return []
    left = list(directory.glob(".tmp-step-*"))
    left += [p for p in directory.glob("step-*") if not (p / COMPLETE).is_file()]
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    return sorted(left)


def checkpoint_step(path: Path) -> int:
    return int(path.name.removeprefix("step-"))


@dataclass
class Restored:
    state: dict[str, Any]  # the trainer's
    optimizer: dict  # state dicts, for the update group to load into its own
    scheduler: dict


def load_checkpoint(path: Path, model) -> Restored:
    """Restore the model's weights and the RNGs in place; return the rest of the checkpoint."""
    if is_lora(model):
        load_adapters(path, model)
    elif not (path / MODEL_FILE).is_file() and (path / ADAPTER_FILE).is_file():
        raise ConfigError(
            f"{path} holds only LoRA adapters, but model.lora.r = 0 (full fine-tuning); fix: "
            "resume with the model.lora settings the run was written with"
        )
    else:
        model.load_state_dict(load_file(path / MODEL_FILE), strict=True)
    payload = torch.load(path / "trainer.pt", weights_only=False)
    set_rng_state(payload["rng"])
    return Restored(payload["state"], payload["optimizer"], payload["scheduler"])


def load_adapters(path: Path, model) -> None:
    """Copy the saved trainable parameters of a LoRA model into it; the saved names must be
    exactly the model's trainable ones (same model.lora settings), shapes included."""
    if not (path / ADAPTER_FILE).is_file():
        raise ConfigError(
            f"{path} holds {'full model weights' if (path / MODEL_FILE).is_file() else 'no weights'}"
            f", not LoRA adapters ({ADAPTER_FILE}), but model.lora.r > 0; fix: resume with the "
            "model.lora settings the run was written with"
        )
    saved, params = load_file(path / ADAPTER_FILE), trainable_state_dict(model)
    missing, unexpected = sorted(set(params) - set(saved)), sorted(set(saved) - set(params))
    if missing or unexpected:
        raise ConfigError(
            f"{path}/{ADAPTER_FILE} does not fit this model's adapters: {len(missing)} trainable "
            f"parameters missing (e.g. {missing[:2]}), {len(unexpected)} unexpected (e.g. "
            f"{unexpected[:2]}); fix: resume with the model.name and model.lora settings the run "
            "was written with"
        )
    wrong = [k for k in params if params[k].shape != saved[k].shape]
    if wrong:
        raise ConfigError(
            f"{path}/{ADAPTER_FILE}: {wrong[0]} has shape {tuple(saved[wrong[0]].shape)}, the "
            f"model's {tuple(params[wrong[0]].shape)} ({len(wrong)} such); fix: resume with the "
            "model.lora settings the run was written with"
        )
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(saved[name])


def load_resumable(directory: Path, at_step: int | None, model, cfg) -> Restored:
    """The newest complete checkpoint in `directory`, or the one of `at_step` (later ones are
    removed: the resumed run writes those steps again, identically), loaded into `model`;
    refused when `cfg` differs from the run's in what determines its numbers."""
    checkpoints = complete_checkpoints(directory)
    if at_step is not None:
        if at_step not in map(checkpoint_step, checkpoints):
            steps = ", ".join(str(checkpoint_step(c)) for c in checkpoints)
            raise ConfigError(
                f"{directory} holds no checkpoint of step {at_step}; fix: resume at one of the "
                f"steps it holds: {steps}"
            )
        for later in [c for c in checkpoints if checkpoint_step(c) > at_step]:
            shutil.rmtree(later)
        checkpoints = [c for c in checkpoints if checkpoint_step(c) <= at_step]
    restored = load_checkpoint(checkpoints[-1], model)
    state = restored.state
    if state["hash"] != cfg.hash():
        raise ConfigError(
            f"{checkpoints[-1]} was written with a different config (hash {state['hash']} vs "
            f"{cfg.hash()}); only train.steps, log.* and distributed.address / rollout_timeout "
            "/ max_restarts may change on resume"
        )
    if state["step"] > cfg.train.steps:
        raise ConfigError(
            f"{checkpoints[-1]} is at step {state['step']}, past train.steps="
            f"{cfg.train.steps}; fix: leave train.steps out or set it to {state['step']} or more"
        )
    return restored
