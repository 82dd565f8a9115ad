"""Settings `rlvr train` fills in where the user set none: the task's tuned settings for the
embedded tiny model, or a pretrained model's, each with where it comes from."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from rlvr.config import Config, ConfigError, build_config, set_dotted
from rlvr.registry import lookup
from rlvr.tasks import TASKS

# A pretrained model on any task: TRL 1.16 GRPOConfig's defaults (lr 1e-6, 512 completion
# tokens), the usual full fine-tuning rate in verl's GRPO recipes too, and micro-batches that
# fit a 0.5-1.5B model's activations. A LoRA adapter moves only its own weights and takes a
# larger step (examples/real_model.toml).
PRETRAINED = {"rollout.max_new_tokens": 512, "train.micro_batch_size": 8}
PRETRAINED_LR = {"full": 1e-6, "lora": 2e-5}
# The tiny model's default lr (1e-4) was tuned on warm starts with a planted mistake for RL to
# flip. A clean warm start (model.pretrain_flawed_share = 0) knows the task's one procedure and
# slips on its own; there 1e-4 collapsed Nim on two seeds of three and guess_number on one of
# one, and 3e-5 did best on countdown (docs/hard-settings.md). A task's own
# tuned lr still wins.
CLEAN_BASE_LR = 3e-5


@dataclass(frozen=True)
class Recommendation:
    key: str  # section.field
    value: Any
    source: str  # where the value comes from, as the console says it


def _candidates(cfg: Config) -> list[Recommendation]:
    if cfg.model.name != "tiny":
        lora = cfg.model.lora.r > 0
        source = "pretrained model" + (" with LoRA" if lora else "")
        lr = PRETRAINED_LR["lora" if lora else "full"]
        return [Recommendation(k, v, source) for k, v in {**PRETRAINED, "train.lr": lr}.items()]
    task_cls = lookup(TASKS, cfg.task.name, "task.name", group="rlvr.tasks")
    tuned = getattr(task_cls, "recommended_tiny", {})
    chosen = [Recommendation(k, v, f"{cfg.task.name} on the tiny model") for k, v in tuned.items()]
    if cfg.model.pretrain_flawed_share == 0 and "train.lr" not in tuned:
        clean = "a clean warm start: model.pretrain_flawed_share=0 on the tiny model"
        chosen.append(Recommendation("train.lr", CLEAN_BASE_LR, clean))
    return chosen


def _value(cfg: Config, key: str) -> tuple[Any, bool]:
    """The key's value, and whether the user set it (in a file, an override or a dict)."""
    section, name = key.split(".")
    holder = getattr(cfg, section)
    return getattr(holder, name), name in holder.model_fields_set


def recommend(cfg: Config) -> tuple[Config, list[Recommendation]]:
    """`cfg` with each recommended setting the user left unset, and those it changed."""
    chosen = []
    for rec in _candidates(cfg):
        value, user_set = _value(cfg, rec.key)
        if not user_set and value != rec.value:
            chosen.append(rec)
    if not chosen:
        return cfg, []
    data = cfg.model_dump(mode="json", exclude_unset=True)
    for rec in chosen:
        set_dotted(data, rec.key, rec.value)
    try:
        return build_config(data), chosen
    except ConfigError as e:  # a recommendation clashes with a key the user did set
        settings = " ".join(f"{r.key}={r.value}" for r in chosen)
        raise ConfigError(
            f"{e}\n(with the recommended settings {settings}; fix: set those keys yourself)"
        ) from None


def describe(chosen: list[Recommendation]) -> str:
    """What the console says at run start: each setting chosen, and how to choose another."""
    lines = [f"  {r.key}={r.value}  ({r.source})" for r in chosen]
    return "\n".join(["rlvr: recommended settings (set a key to choose your own):", *lines])


def apply_recommended(cfg: Config) -> Config:
    """`recommend`, saying what it chose on stderr unless the run is quiet."""
    cfg, chosen = recommend(cfg)
    if chosen and not cfg.log.quiet:
        print(describe(chosen), file=sys.stderr)
    return cfg
