"""Prompt sharing in the training passes: the prompt that a group's samples have in common runs
through the model once, and its KV cache (with grad) serves every sample of the group."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from rlvr.models.lora import unwrapped


def cache_keyword(model: PreTrainedModel) -> str:
    """The forward's KV-cache argument (and output field): transformers 5 renamed
    `past_key_values` to `cache`. A LoRA wrapper forwards any keyword, so ask the model inside."""
    parameters = inspect.signature(unwrapped(model).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


@dataclass(frozen=True)
class Prompts:
    """Which rows of a right-padded batch share a prompt. A row's prompt is every token before
    the input of its first policy target (the first column whose loss_mask is 1), so each
    computed position the prompt skips is one the loss never reads."""

    unit: torch.Tensor  # [B] long: rows with equal unit hold the same prompt tokens
    length: torch.Tensor  # [B] long: prompt tokens of the row (its first policy column)


def find_prompts(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor
) -> Prompts:
    """input_ids, attention_mask [B, T]; loss_mask [B, T-1]. A row without policy targets
    still leaves its last input position outside the prompt, so every row has a suffix."""
    lengths = attention_mask.sum(-1)
    policy = loss_mask.bool()
    first = torch.where(policy.any(-1), policy.int().argmax(-1), lengths - 1)
    prompt = torch.minimum(first, lengths - 2).clamp(min=0)
    seen: dict[tuple[int, ...], int] = {}
    unit = [
        seen.setdefault(tuple(ids[:n].tolist()), len(seen))
        for ids, n in zip(input_ids, prompt.tolist())
    ]
    return Prompts(torch.tensor(unit), prompt)


def worth_sharing(prompts: Prompts, rows: torch.Tensor) -> bool:
    """Two forwards instead of one pay off only when some prompt has several rows."""
    unit = prompts.unit[rows]
    return len(unit.unique()) < len(unit) and bool((prompts.length[rows] > 0).all())


def shared_logits(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompts: Prompts
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits of every row's suffix (the positions after its prompt), each distinct prompt
    computed once. input_ids, attention_mask [B, T] right-padded; `prompts` of these rows.
    Returns logits [B, S, V] and their targets [B, S], and each row's first target column and
    suffix length [B]: suffix position j of row i stands for target column start_i + j."""
    device = model.device
    _, source = torch.unique(prompts.unit, return_inverse=True)
    some_row = torch.zeros(int(source.max()) + 1, dtype=torch.long)
    some_row.scatter_(0, source, torch.arange(len(source)))
    start = prompts.length
    width = int(start.max())
    prompt_ids = torch.zeros((len(some_row), width), dtype=torch.long)
    prompt_attention = torch.zeros_like(prompt_ids)
    for row, (ids, n) in enumerate(zip(input_ids[some_row], start[some_row].tolist())):
        # left padding ends every prompt at the same column
        prompt_ids[row, width - n :], prompt_attention[row, width - n :] = ids[:n], 1
    positions = (prompt_attention.cumsum(-1) - 1).clamp(min=0)
    cache_arg = cache_keyword(model)
    out = model(input_ids=prompt_ids.to(device), attention_mask=prompt_attention.to(device),
                position_ids=positions.to(device), use_cache=True, logits_to_keep=1)  # fmt: skip
    cache = getattr(out, cache_arg, None)
    if cache is None or not hasattr(cache, "batch_select_indices"):
        raise RuntimeError(
            f"train.share_prompt needs a model whose forward returns a KV cache that can be "
            f"continued; {type(model).__name__} returned {type(cache).__name__}. Set "
            f"train.share_prompt=false."
        )
    cache.batch_select_indices(source.to(device))

    # a row's suffix: its inputs from the prompt's end to its last input position (the last
    # token is only a target)
    count = attention_mask.sum(-1) - 1 - start
    steps = torch.arange(int(count.max()))
    column = start[:, None] + steps[None]  # [B, S]
    inside = steps[None] < count[:, None]
    last = input_ids.shape[1] - 1
    suffix_ids = torch.where(inside, input_ids.gather(1, column.clamp(max=last)), 0)
    targets = torch.where(inside, input_ids.gather(1, (column + 1).clamp(max=last)), 0)
    attention = torch.cat([prompt_attention[source], inside.long()], -1)
    out = model(input_ids=suffix_ids.to(device), attention_mask=attention.to(device),
                position_ids=column.to(device), use_cache=True, **{cache_arg: cache})  # fmt: skip
    return out.logits, targets.to(device), start, count


def to_columns(
    values: torch.Tensor, start: torch.Tensor, count: torch.Tensor, width: int
) -> torch.Tensor:
    """Per-suffix-position values [B, S] placed at their target columns [B, width]; prompt
    columns and padding get 0. Differentiable (a gather, not an in-place write)."""
    index = torch.arange(width)[None] - start[:, None]  # [B, width]: suffix position of a column
    inside = (index >= 0) & (index < count[:, None])
    index, inside = index.to(values.device), inside.to(values.device)
    picked = values.gather(1, index.clamp(0, max(values.shape[1] - 1, 0)))
    return torch.where(inside, picked, torch.zeros((), dtype=values.dtype, device=values.device))


def batch_prompts(batch, share_prompt: bool) -> Prompts | None:
    """A Batch's shared prompts when train.share_prompt is on."""
    if not share_prompt:
        return None
    return find_prompts(batch.input_ids, batch.attention_mask, batch.loss_mask)
