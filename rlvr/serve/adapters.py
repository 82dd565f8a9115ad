"""One base model and the LoRA adapters trained on it through `rlvr serve`: each adapter is a
Tinker training client, with its own optimizer, gradients and checkpoints."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from peft import PeftModel
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import LoraSettings
from rlvr.models.logprobs import ChosenLogprobs
from rlvr.models.lora import (
    adapters_disabled,
    add_adapter,
    apply_lora,
    is_lora,
    load_adapter_state,
    named_adapter_state,
    use_adapter,
)
from rlvr.serve.losses import INPUTS, TINKER_LOSSES, Batch, settings
from rlvr.serve.wire import Datum

LORA_ALPHA = 32  # Tinker's fixed LoRA alpha
# Tinker's train_attn / train_mlp / train_unembed, as the layer names of Llama-style models
LAYERS = {
    "train_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "train_mlp": ("gate_proj", "up_proj", "down_proj"),
    "train_unembed": ("lm_head",),
}


@dataclass
class Adapter:
    name: str  # the training client's model_id, and its peft adapter name
    lora: dict  # rank, seed and the train_* flags, as the client asked
    optimizer: torch.optim.Optimizer | None = None  # made at the first optim_step
    params: list[nn.Parameter] = field(default_factory=list)


class AdapterHost:
    """The base model (wrapped by peft at the first adapter) and its adapters by name."""

    def __init__(self, name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        self.name, self.tokenizer = name, tokenizer
        self.model: PreTrainedModel | PeftModel = model.eval().requires_grad_(False)
        self.adapters: dict[str, Adapter] = {}
        # the trainer ranks' process group (serve/cluster.py): each rank holds every adapter and
        # a share of each forward_backward, and a step sums their gradients (None: this alone)
        self.group: dist.ProcessGroup | None = None
        self.max_length = int(getattr(model.config, "max_position_embeddings", 0) or 2**31)
        self.vocab = int(model.get_input_embeddings().num_embeddings)
        self.linear = {
            n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)
        }

    def _targets(self, lora: dict) -> list[str]:
        present = self.linear  # as the base had them: peft's wrappers add Linear layers
        wanted = {
            layer for flag, layers in LAYERS.items() if lora.get(flag, True) for layer in layers
        }
        targets = sorted(wanted & present)
        if not targets:
            raise ValueError(
                f"the LoRA layers asked for ({sorted(wanted)}) are not in {self.name!r}, whose "
                f"linear layers are {sorted(present)}"
            )
        return targets

    def add(self, name: str, lora: dict) -> Adapter:
        """A fresh adapter (B = 0, so it starts as the base), drawn from lora['seed']."""
        if lora["rank"] <= 0:
            raise ValueError(f"lora rank must be positive; got {lora['rank']}")
        settings = LoraSettings(
            r=lora["rank"], alpha=LORA_ALPHA, dropout=0.0, target_modules=self._targets(lora)
        )
        torch.manual_seed(lora.get("seed") or 0)
        if is_lora(self.model):
            add_adapter(self.model, name, settings)
        else:
            self.model = apply_lora(self.model, settings, name)
        params = [p for n, p in self.model.named_parameters() if f".{name}." in n]
        adapter = self.adapters[name] = Adapter(name, dict(lora), params=params)
        return adapter

    def remove(self, name: str) -> None:
        self.model.delete_adapter(name)
        del self.adapters[name]

    def get(self, name: str) -> Adapter:
        if name not in self.adapters:
            raise KeyError(f"no training client {name!r} on this service")
        return self.adapters[name]

    def active(self, name: str | None):
        """The model computing as adapter `name` alone, or as the base (None)."""
        if not is_lora(self.model):
            return nullcontext(self.model)
        return adapters_disabled(self.model) if name is None else use_adapter(self.model, name)

    def check(self, data: list[Datum], loss_fn: str | None, config: dict) -> dict:
        """ValueError on anything in a forward_backward that cannot run; the loss's settings."""
        cfg = settings(loss_fn, config) if loss_fn else {}
        needs = ("target_tokens", *INPUTS.get(loss_fn or "", ()))
        if not data:
            raise ValueError("forward_backward got no datums")
        for i, datum in enumerate(data):
            n = len(datum.tokens)
            if not 0 < n <= self.max_length:
                raise ValueError(
                    f"datum {i} has {n} tokens; {self.name!r} takes 1..{self.max_length}"
                )
            missing = [k for k in needs if k not in datum.inputs]
            if missing:
                raise ValueError(
                    f"datum {i} lacks loss_fn_inputs {missing} ({loss_fn} reads {list(needs)})"
                )
            wrong = {k: len(v) for k, v in datum.inputs.items() if len(v) != n}
            if wrong:
                raise ValueError(
                    f"datum {i}: loss_fn_inputs {wrong} differ from its {n} input tokens"
                )
            ids = np.concatenate([datum.tokens, datum.inputs["target_tokens"]])
            if ids.min() < 0 or ids.max() >= self.vocab:
                raise ValueError(
                    f"datum {i} has token ids outside the vocabulary 0..{self.vocab - 1}"
                )
        return cfg

    def check_prompt(self, prompt: list[int], max_tokens: int) -> None:
        """ValueError unless a sample of `max_tokens` after `prompt` fits the model."""
        if not 0 < len(prompt) + max_tokens <= self.max_length:
            raise ValueError(
                f"prompt of {len(prompt)} tokens plus max_tokens {max_tokens} exceeds the "
                f"{self.max_length} positions of {self.name!r}"
            )
        if prompt and not 0 <= min(prompt) <= max(prompt) < self.vocab:
            raise ValueError(f"the prompt has token ids outside the vocabulary 0..{self.vocab - 1}")

    def _batch(self, data: list[Datum]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Batch]:
        """Right-padded input ids, attention, targets [B, T] and the loss's inputs."""
        width = max(len(d.tokens) for d in data)
        ids = torch.zeros(len(data), width, dtype=torch.long)
        mask = torch.zeros(len(data), width)
        inputs: dict[str, torch.Tensor] = {}
        for row, datum in enumerate(data):
            n = len(datum.tokens)
            ids[row, :n] = torch.from_numpy(datum.tokens)
            mask[row, :n] = 1
            for key, value in datum.inputs.items():
                inputs.setdefault(key, torch.zeros(len(data), width))[row, :n] = torch.from_numpy(
                    value.astype(np.float32)
                )
        targets = inputs.pop("target_tokens").long()
        return ids, mask.long(), targets, Batch(mask, inputs)

    def forward_backward(
        self,
        name: str | None,
        data: list[Datum],
        loss_fn: str | None,
        config: dict,
        backward: bool = True,
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Each datum's target logprobs and the loss's sum; with `backward`, a loss and an
        adapter, its gradient is added to the adapter's (Tinker accumulates until optim_step)."""
        cfg = self.check(data, loss_fn, config)
        ids, attention, targets, batch = self._batch(data)
        train = backward and loss_fn is not None and name is not None
        with self.active(name) as model, torch.set_grad_enabled(train):
            device = next(model.parameters()).device
            logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
            logprobs, _, _ = ChosenLogprobs.apply(logits, targets.to(device), 1.0, False, None)
            logprobs = logprobs.cpu()
            metrics = {}
            if loss_fn is not None:
                loss = TINKER_LOSSES[loss_fn](logprobs, batch, cfg)
                if train:
                    loss.backward()
                metrics["loss:sum"] = float(loss.detach())
        lengths = batch.loss_mask.sum(-1).long().tolist()
        rows = logprobs.detach().numpy()
        return [rows[i, :n] for i, n in enumerate(lengths)], metrics

    def optim_step(self, name: str, adam: dict) -> dict[str, float]:
        """One AdamW step on the adapter's accumulated gradients, which it then clears."""
        adapter = self.get(name)
        hyper = {
            "lr": adam["learning_rate"], "betas": (adam["beta1"], adam["beta2"]),
            "eps": adam["eps"], "weight_decay": adam["weight_decay"],
        }  # fmt: skip
        if adapter.optimizer is None:
            adapter.optimizer = torch.optim.AdamW(adapter.params, **hyper)
        for group in adapter.optimizer.param_groups:
            group.update(hyper)
        if self.group is not None:
            sum_gradients(adapter.params, self.group)
        grads = [p.grad for p in adapter.params if p.grad is not None]
        norm = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
        if adam["grad_clip_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(adapter.params, adam["grad_clip_norm"])
        adapter.optimizer.step()
        adapter.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": norm}

    def state(self, name: str, optimizer: bool) -> dict:
        """What a checkpoint holds: the adapter's weights, its LoRA settings, and (for training
        state) the optimizer."""
        adapter = self.get(name)
        weights = named_adapter_state(self.model, name)
        state = {"base_model": self.name, "lora": adapter.lora, "weights": weights}
        if optimizer:
            state["optimizer"] = adapter.optimizer.state_dict() if adapter.optimizer else None
        return state

    def load(self, name: str, state: dict, optimizer: bool) -> None:
        """A checkpoint's weights (and optimizer state) into adapter `name`, made if missing."""
        if state["base_model"] != self.name:
            raise ValueError(
                f"the checkpoint was trained on {state['base_model']!r}; this service serves "
                f"{self.name!r}"
            )
        adapter = self.adapters.get(name) or self.add(name, state["lora"])
        if adapter.lora["rank"] != state["lora"]["rank"]:
            raise ValueError(
                f"the checkpoint has LoRA rank {state['lora']['rank']}; client {name!r} has "
                f"rank {adapter.lora['rank']}"
            )
        load_adapter_state(self.model, name, state["weights"])
        for p in adapter.params:
            p.grad = None
        adapter.optimizer = None
        saved = state.get("optimizer") if optimizer else None
        if saved is not None:
            adapter.optimizer = torch.optim.AdamW(adapter.params, lr=0.0)
            adapter.optimizer.load_state_dict(saved)


def sum_gradients(params: list[nn.Parameter], group: dist.ProcessGroup) -> None:
    """Each parameter's gradient summed over the group's ranks, in one all-reduce through CPU
    (LoRA gradients are small, and gloo reaches every device). A parameter no rank has a
    gradient for keeps None, so AdamW skips it as it would in one process."""
    held = [p.grad is not None for p in params]
    flat = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().cpu().flatten()
         for p in params] + [torch.tensor(held, dtype=torch.float32)]
    )  # fmt: skip
    dist.all_reduce(flat, group=group)
    start = 0
    for p, anyone in zip(params, flat[-len(params) :].tolist(), strict=True):
        grad = flat[start : start + p.numel()].view_as(p)
        start += p.numel()
        p.grad = grad.to(p.device, p.dtype) if anyone else None


def save(state: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)  # a crash mid-write leaves the previous checkpoint whole
