"""The PPO critic: a value model, fitted by a clipped value loss alongside the policy."""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import PreTrainedModel

from rlvr.algos.losses import AGGREGATIONS, Normalisers
from rlvr.config import Config, ConfigError
from rlvr.models.lora import is_lora, trainable_state_dict, unwrapped
from rlvr.registry import lookup
from rlvr.train.update import normalisers, trim
from rlvr.types import Batch


class ValueModel(nn.Module):
    """The policy's transformer body (a separate copy) with a scalar head on its last hidden state.

    A LoRA policy's body is copied with its adapter layers and frozen base, so the critic trains
    its own adapters and head, not the whole body."""

    def __init__(self, policy: PreTrainedModel):
        super().__init__()
        self.body = copy.deepcopy(unwrapped(policy).base_model)
        self.head = nn.Linear(policy.config.hidden_size, 1, device=policy.device)
        nn.init.zeros_(self.head.weight)  # start from V = 0: the first advantages are the returns
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Values [B, T-1]: column t estimates the return from token t+1 on (aligned like the loss mask)."""
        device = self.head.weight.device
        hidden = self.body(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device))
        return self.head(hidden.last_hidden_state[:, :-1].float()).squeeze(-1)


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token 0.5 * max((V - R)^2, (V_old + clip(V - V_old, +-clip) - R)^2), as in PPO2, and
    where the clipped term is the larger (verl's vf_clipfrac)."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    unclipped_loss, clipped_loss = (values - returns) ** 2, (clipped - returns) ** 2
    return 0.5 * torch.maximum(unclipped_loss, clipped_loss), clipped_loss > unclipped_loss


def freeze(model: nn.Module, patterns: list[str]) -> None:
    """Stop training every parameter whose name contains one of `patterns` (algo.critic_freeze,
    e.g. ['attn']: SAO's frozen-attention critic); a pattern that matches none is a ConfigError."""
    names = [name for name, _ in model.named_parameters()]
    for pattern in patterns:
        if not any(pattern in name for name in names):
            parts = sorted({p for name in names for p in name.split(".") if not p.isdigit()})
            raise ConfigError(
                f"algo.critic_freeze: '{pattern}' matches no parameter of the value model. "
                f"Fix: use a part of its parameter names: {', '.join(parts)}."
            )
    for name, param in model.named_parameters():
        if any(pattern in name for pattern in patterns):
            param.requires_grad_(False)


class Critic:
    """A value model with its own optimizer and learning rate (algo.critic_lr)."""

    def __init__(self, policy: PreTrainedModel, cfg: Config):
        self.cfg = cfg
        key = "loss_agg" if cfg.algo.value_loss_agg == "loss_agg" else "value_loss_agg"
        self.aggregate = lookup(AGGREGATIONS, getattr(cfg.algo, key), f"algo.{key}")
        self.lora = is_lora(policy)  # then its frozen body is rebuilt from the policy, not saved
        self.model = ValueModel(policy)
        freeze(self.model, cfg.algo.critic_freeze)
        self.optimizer = torch.optim.AdamW(
            trainable_state_dict(self.model).values(), lr=cfg.algo.critic_lr
        )

    @torch.no_grad()
    def values(self, batch: Batch) -> torch.Tensor:
        """Values [B, T-1] of the whole batch, zero off the loss mask."""
        out = torch.zeros_like(batch.loss_mask)
        self.model.eval()
        for rows in torch.arange(len(batch)).split(self.cfg.train.micro_batch_size):
            width = trim(rows, batch.attention_mask)
            values = self.model(batch.input_ids[rows, :width], batch.attention_mask[rows, :width])
            out[rows, : width - 1] = values.float().cpu()
        return out * batch.loss_mask

    def update(
        self,
        batch: Batch,
        returns: torch.Tensor,
        old_values: torch.Tensor,
        generator: torch.Generator,
    ) -> dict[str, float]:
        """Fit the values to the returns: algo.critic_updates passes (SAO's two-timescale critic)
        of algo.ppo_epochs x algo.minibatches optimizer steps each, the per-token loss reduced
        by algo.value_loss_agg with the minibatch's normalisers (as the policy's)."""
        algo, train = self.cfg.algo, self.cfg.train
        sums, steps = {"critic/value_loss": 0.0, "critic/vf_clip_frac": 0.0}, 0
        norm_constant = float(algo.loss_norm_tokens or self.cfg.rollout.max_new_tokens)
        self.model.train()
        for _ in range(algo.critic_updates * algo.ppo_epochs):
            for minibatch in torch.randperm(len(batch), generator=generator).chunk(
                algo.minibatches
            ):
                self.optimizer.zero_grad(set_to_none=True)
                num_tokens, num_seqs = normalisers(batch.loss_mask[minibatch], algo)
                for rows in minibatch.split(train.micro_batch_size):
                    width = trim(rows, batch.attention_mask)
                    values = self.model(
                        batch.input_ids[rows, :width], batch.attention_mask[rows, :width]
                    )
                    device = values.device
                    per_token, clipped = clipped_value_loss(
                        values,
                        old_values[rows, : width - 1].to(device),
                        returns[rows, : width - 1].to(device),
                        algo.value_clip,
                    )
                    mask = batch.loss_mask[rows, : width - 1].to(device)
                    # minibatch normalisers: the micro-batches' losses sum to the minibatch's
                    scale = Normalisers(mask, num_tokens, num_seqs, norm_constant)
                    loss = self.aggregate(per_token, scale)
                    loss.backward()
                    sums["critic/value_loss"] += loss.item()
                    on = mask.bool() & clipped
                    sums["critic/vf_clip_frac"] += float(on.sum()) / max(num_tokens, 1.0)
                nn.utils.clip_grad_norm_(self.model.parameters(), train.max_grad_norm)
                self.optimizer.step()
                steps += 1
        return {name: value / max(steps, 1) for name, value in sums.items()}

    def state_dict(self) -> dict:
        model = trainable_state_dict(self.model) if self.lora else self.model.state_dict()
        model = {k: v.detach() for k, v in model.items()}
        return {"model": model, "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.lora and set(state["model"]) != set(trainable_state_dict(self.model)):
            raise ConfigError(
                "the checkpoint's critic does not fit this critic's adapters; fix: resume with "
                "the model.lora settings the run was written with"
            )
        self.model.load_state_dict(state["model"], strict=not self.lora)
        self.optimizer.load_state_dict(state["optimizer"])
