"""LoRA adapters on the policy through peft: wrapping, the reference view (adapters off), the
weights that sync, checkpoint and save. The rest of rlvr reaches peft only through here."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from peft import (
    LoraConfig,
    PeftModel,
    get_peft_model,
    get_peft_model_state_dict,
    set_peft_model_state_dict,
)
from peft.tuners.lora import LoraLayer
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase
from transformers.pytorch_utils import Conv1D

from rlvr.config import ConfigError, LoraSettings, ModelConfig
from rlvr.models import tiny
from rlvr.models.loading import from_pretrained

ADAPTER_DIR = "adapter"  # save_final: the adapter alone, under the merged model's directory
KEY = "model.lora.target_modules"


def is_lora(model: nn.Module) -> bool:
    return isinstance(model, PeftModel)


def unwrapped(model: nn.Module) -> PreTrainedModel:
    """The Hugging Face model itself: under a LoRA wrapper, the base with its adapter layers;
    under DDP (a replicated update, rlvr/train/data_parallel.py), the model it replicates."""
    if isinstance(model, DistributedDataParallel):
        model = model.module
    return model.get_base_model() if is_lora(model) else model


def _matches(pattern: list[str] | str, name: str) -> bool:
    """peft's rule: a list entry is a whole module name or its last dotted parts; a string is a
    regular expression that must match the whole name."""
    if isinstance(pattern, str):
        return re.fullmatch(pattern, name) is not None
    return any(name == p or name.endswith("." + p) for p in pattern)


def _check_targets(model: PreTrainedModel, targets: list[str] | str) -> None:
    """ConfigError naming the entries of model.lora.target_modules that match no layer (or only
    layers LoRA cannot adapt), with the linear layers this model has."""
    if targets == "all-linear":
        return
    names = [name for name, _ in model.named_modules() if name]
    linear = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    )
    fix = f"fix: name layers this model has, e.g. {linear}, or use {KEY}='all-linear'"
    entries = [targets] if isinstance(targets, str) else targets
    missing = [
        t for t in entries if not any(_matches(t if t is targets else [t], n) for n in names)
    ]
    if missing:
        raise ConfigError(f"{KEY} = {targets!r}: {missing} match no layer of the model; {fix}")
    adaptable = (nn.Linear, nn.Embedding, Conv1D, LoraLayer)  # LoraLayer: a second adapter
    modules = dict(model.named_modules())
    wrong = [n for n in names if _matches(targets, n) and not isinstance(modules[n], adaptable)]
    if wrong:
        raise ConfigError(
            f"{KEY} = {targets!r} matches {wrong[:5]}, which are not linear or embedding layers, "
            f"so LoRA cannot adapt them; {fix}"
        )


def check_targets_early(m: ModelConfig) -> None:
    """apply_lora's check of model.lora.target_modules on a weightless copy of the architecture
    (meta device), so a target that fits no layer stops the run before a warm start or a load
    of weights. An architecture that cannot be built from its config alone is left to load."""
    if m.name == "tiny":
        config = tiny.build_config(m.preset, tiny.build_tokenizer(), m.layers)
    else:
        config = from_pretrained(AutoConfig, m.name, trust_remote_code=m.trust_remote_code)
    try:
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(
                config, trust_remote_code=m.trust_remote_code
            )
    except Exception:
        return
    _check_targets(skeleton, m.lora.target_modules)


def _lora_config(settings: LoraSettings) -> LoraConfig:
    if settings.r <= 0:
        raise ValueError("LoRA needs model.lora.r > 0 (r = 0 is full fine-tuning)")
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
    )


def apply_lora(model: PreTrainedModel, settings: LoraSettings, name: str = "default") -> PeftModel:
    """Wrap `model` with a fresh LoRA adapter `name` (settings.r > 0); its own weights are frozen
    in place."""
    config = _lora_config(settings)
    _check_targets(model, settings.target_modules)
    with warnings.catch_warnings():  # peft asks transformers a deprecated question
        warnings.filterwarnings(
            "ignore", message=".*is_gradient_checkpointing", category=FutureWarning
        )
        return get_peft_model(model, config, adapter_name=name)


def add_adapter(model: PeftModel, name: str, settings: LoraSettings) -> None:
    """A second, fresh adapter `name` on the same frozen base (a debate's critic role); the
    active adapter is left as it was."""
    config = _lora_config(settings)
    _check_targets(unwrapped(model), settings.target_modules)
    active = model.active_adapter
    model.add_adapter(name, config)
    model.set_adapter(active)


@contextmanager
def use_adapter(model: PeftModel, name: str) -> Iterator[PeftModel]:
    """Within the block `model` computes, trains and saves as adapter `name` alone: peft makes the
    active adapter the only trainable one. The previous adapter is active again on exit."""
    previous = model.active_adapter
    model.set_adapter(name)
    try:
        yield model
    finally:
        model.set_adapter(previous)


@contextmanager
def adapters_disabled(model: PeftModel) -> Iterator[PreTrainedModel]:
    """Within the block `model` computes as its frozen base (the reference policy); only for LoRA
    models, whose adapters are restored on exit."""
    if not is_lora(model):
        raise TypeError(f"adapters_disabled needs a LoRA (peft) model, got {type(model).__name__}")
    with model.disable_adapter():
        yield model


def trainable_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train (under LoRA: the adapters), by `named_parameters` name, which is
    the same for every model built by the same load + apply_lora."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def adapter_state_dict(model: PeftModel) -> dict[str, torch.Tensor]:
    """The adapter weights in peft's own layout (adapter_model.safetensors names), for engines
    that load adapters and sync only them."""
    return get_peft_model_state_dict(model)


def named_adapter_state(model: PeftModel, name: str) -> dict[str, torch.Tensor]:
    """Adapter `name`'s own weights (no base embeddings, even where the adapter covers a tied
    lm_head), under names without the adapter's: loadable into any adapter of the same shape."""
    return get_peft_model_state_dict(model, adapter_name=name, save_embedding_layers=False)


def load_adapter_state(model: PeftModel, name: str, weights: dict[str, torch.Tensor]) -> None:
    """`named_adapter_state`'s weights into adapter `name`."""
    set_peft_model_state_dict(model, weights, adapter_name=name)


def _lora_layers(model: PeftModel) -> dict[str, LoraLayer]:
    return {n: m for n, m in unwrapped(model).named_modules() if isinstance(m, LoraLayer)}


def merged_state_dict(model: PeftModel) -> dict[str, torch.Tensor]:
    """The base model's `state_dict()` with the active adapters merged in (W + scaling * B @ A per
    adapted layer), under the plain model's own parameter names; the live model is left as it
    is. Weights without an adapter are the live tensors (detached), not copies. Tied weights
    stay tied: a key that shares an adapted weight gets the same merged tensor."""
    layers = _lora_layers(model)
    merged: dict[int, torch.Tensor] = {}  # id of the base weight -> merged weight
    with torch.no_grad():
        for layer in layers.values():
            weight = layer.get_base_layer().weight
            if layer.merged:  # merged in place already: the live weight is the merged one
                continue
            delta = sum(
                layer.get_delta_weight(a) for a in layer.active_adapters if a in layer.lora_A
            )
            merged[id(weight)] = weight.detach() + delta if torch.is_tensor(delta) else weight
    out = {}
    base = unwrapped(model)
    for key, tensor in base.state_dict(keep_vars=True).items():
        owner, _, leaf = key.rpartition(".")
        parts = owner.split(".")
        # peft nests the adapted layer as `<layer>.base_layer`, beside `<layer>.lora_A...`
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in layers:
                rest = parts[i:]
                break
        else:
            prefix, rest = None, None
        if prefix is not None:
            if not rest or rest[0] != "base_layer":
                continue  # lora_A / lora_B / dropout: not part of the plain model
            key = ".".join([prefix, *rest[1:], leaf])
        out[key] = merged.get(id(tensor), tensor).detach()
    return out


def save_final(model: PeftModel, tokenizer: PreTrainedTokenizerBase, directory: Path) -> None:
    """Write the merged model into `directory` (a plain `AutoModelForCausalLM.from_pretrained`
    loads it) and the adapter alone into `directory/adapter` (`PeftModel.from_pretrained(base,
    directory / 'adapter')` on the untouched base loads it)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    unwrapped(model).save_pretrained(directory, state_dict=merged_state_dict(model))
    tokenizer.save_pretrained(directory)
    # the active adapter alone: a debate's roles share one model, and each saves its own
    name, adapter_dir = model.active_adapter, directory / ADAPTER_DIR
    model.save_pretrained(adapter_dir, selected_adapters=[name])
    if name != "default":  # peft nests any other adapter in a folder of its name
        for file in (adapter_dir / name).iterdir():
            file.replace(adapter_dir / file.name)
        (adapter_dir / name).rmdir()
