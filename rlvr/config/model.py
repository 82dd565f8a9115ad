"""The `model` section: which policy model, its warm start (tiny model) and its LoRA
adapters."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Section


class LoraSettings(Section):
    """LoRA adapters on the policy (peft): only the adapters train; the base stays frozen."""

    r: int = Field(
        0,
        ge=0,
        description="LoRA rank; 0 trains every weight (full fine-tuning), r > 0 trains only "
        "rank-r adapters on model.lora.target_modules (e.g. 16).",
    )
    alpha: float = Field(
        16.0, gt=0, description="LoRA scaling numerator: adapter outputs are scaled by alpha / r."
    )
    dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the adapters' input during training."
    )
    target_modules: list[str] | str = Field(
        "all-linear",
        description="Layers that get adapters: 'all-linear' (every linear layer but the output "
        "head), a list of module names or name suffixes such as [q_proj, v_proj], or a regular "
        "expression matched against whole module names.",
    )

    @field_validator("target_modules")
    @classmethod
    def _nonempty(cls, value: list[str] | str) -> list[str] | str:
        names = [value] if isinstance(value, str) else value
        if not names or not all(n.strip() for n in names):
            raise ValueError("names no layer (use 'all-linear' or names such as [q_proj, v_proj])")
        return value


class ModelConfig(Section):
    name: str = Field(
        "tiny",
        description="'tiny' for the embedded character-level model, else a Hugging Face hub id "
        "or a local directory holding a causal LM and its tokenizer.",
    )
    preset: str = Field(
        "nano", description="Size preset of the tiny model (see `rlvr list presets`)."
    )
    layers: int | None = Field(
        None,
        ge=1,
        description="Tiny model only: transformer layers, in place of the preset's (e.g. 1 for "
        "the one-layer transformer of arXiv 2601.15158); unset, the preset's.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Parameter dtype of the policy (and reference) model."
    )
    device: str = Field(
        "auto",
        description="Torch device for the policy: 'auto' (CUDA when available, else CPU), 'cpu', 'cuda:0', ...",
    )
    trust_remote_code: bool = Field(
        False, description="Allow hub models that ship their own modelling code."
    )
    pretrain_steps: int = Field(
        700,
        ge=0,
        description="Tiny model only: supervised warm-start steps on task demonstrations; 0 "
        "starts RL from the untrained model (from scratch), its weights as initialised from "
        "train.seed.",
    )
    pretrain_batch_size: int | None = Field(
        None,
        gt=0,
        description="Tiny model only: warm-start batch size; unset, the task's own (32 for "
        "arithmetic, 64 for the others).",
    )
    pretrain_lr: float = Field(
        2e-3, gt=0, description="Tiny model only: warm-start peak learning rate."
    )
    pretrain_holdout: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Tiny model only: share of a finite task's training rows (a JSONL file's; "
        "at most 256) kept out of the warm start to stop it early: their loss is measured every 25 steps, "
        "and after 4 measurements without a new best the warm start stops with its best "
        "weights, so a small file is not memorised. 0: every row, all pretrain_steps.",
    )
    pretrain_flawed_share: float = Field(
        0.6,
        ge=0,
        le=1,
        description="Tiny model only: share of warm-start demonstrations that make the task's "
        "systematic mistake, so the base is imperfect and RL has work to do. 0 (a clean base) "
        "also recommends train.lr = 3e-5 where neither you nor the task set one.",
    )
    pretrain_hint_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Tiny model only: share of warm-start demonstrations whose prompt carries "
        "a hint, the first k of model.pretrain_hint_segments segments of the reply shown (k "
        "uniform from 1 to all), so the base can read RGPO's hints as a real LLM can "
        "(single-turn tasks).",
    )
    pretrain_hint_segments: int = Field(
        4,
        ge=1,
        description="model.pretrain_hint_share: the segments a warm-start reply is cut into for "
        "its hint (methods.rgpo.segments when both are set).",
    )
    lora: LoraSettings = Field(
        default_factory=LoraSettings,
        description="LoRA adapters (off while lora.r = 0).",
    )
