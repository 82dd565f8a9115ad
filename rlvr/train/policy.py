"""The policy a run starts from: model.name, or the tiny model's warm start (built and cached on
first use), with its prompts fitted to the context and LoRA adapters where configured."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from rlvr.config import Config
from rlvr.models.loading import load_model, resolve_device
from rlvr.models.lora import apply_lora, check_targets_early, is_lora, save_final
from rlvr.train.display import Display
from rlvr.train.prompt_fit import fit_prompts
from rlvr.train.warmstart import ensure_warm_start, held_out_summary, warm_start_path


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def policy_path(cfg: Config, task) -> str:
    """Where the policy's starting weights live: model.name, or the tiny model's warm start."""
    return str(warm_start_path(cfg, task)) if cfg.model.name == "tiny" else cfg.model.name


def load_policy(cfg: Config, components, display: Display):
    """The policy and tokenizer, once the task's prompts are fitted into its context; the tiny
    model is warm-started (and cached) on first use."""
    m, task = cfg.model, components.task
    if m.lora.r > 0:  # a LoRA target that fits no layer stops the run before any loading
        check_targets_early(m)
    tokenizer = fit_prompts(cfg, task, m.name, display.message)
    name = policy_path(cfg, task)
    if m.name == "tiny":
        tokenizer = None  # the warm start saves its own
        if not (Path(name) / "COMPLETE").is_file():
            with display.bar("warm start (once per settings)", m.pretrain_steps) as bar:
                ensure_warm_start(cfg, task, lambda s, loss: bar.update(s, {"sft_loss": loss}))
            summary = held_out_summary(Path(name))
            if summary:  # a file's warm start that stopped on its held-out rows
                display.message(summary)
    model, tokenizer = load_model(name, m.dtype, m.trust_remote_code, tokenizer=tokenizer)
    # A warm start built just now drew from the global generators: reseed, so the adapters (and
    # all that follows) start the same whether or not the warm start was cached.
    seed_everything(cfg.train.seed)
    if m.lora.r > 0:  # the loaded weights freeze; only the adapters train
        model = apply_lora(model, m.lora)
    return model.to(resolve_device(m.device)), tokenizer


def save_policy(model, tokenizer, directory: Path) -> None:
    """The trained policy as a Hugging Face model directory; under LoRA the merged weights, plus
    the adapter alone in directory/adapter."""
    if is_lora(model):
        save_final(model, tokenizer, directory)
    else:
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
