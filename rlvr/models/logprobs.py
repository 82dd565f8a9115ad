"""Teacher-forced per-token logprobs (and entropy) of a causal LM on a right-padded batch,
computed in chunks so that no full-vocabulary float32 copy of the logits is ever kept."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from rlvr.models.shared_prefix import Prompts, shared_logits, to_columns

CHUNK_ELEMENTS = 1 << 24  # logits entries upcast to float32 at a time (64 MB)


def chunks(rows: int, positions: int, vocab: int) -> Iterator[tuple[slice, slice]]:
    """(rows, positions) slices covering a [rows, positions, vocab] tensor, each about
    CHUNK_ELEMENTS entries: whole rows when one fits, else pieces of one row."""
    per_row = positions * vocab
    if per_row <= CHUNK_ELEMENTS:
        step = CHUNK_ELEMENTS // per_row
        for start in range(0, rows, step):
            yield slice(start, start + step), slice(None)
        return
    step = max(1, CHUNK_ELEMENTS // vocab)
    for row in range(rows):
        for start in range(0, positions, step):
            yield slice(row, row + 1), slice(start, start + step)


def autocast(mode: str, device: torch.device) -> torch.autocast:
    """The train.autocast context for a forward pass: bf16 matmuls, or off."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=mode == "bfloat16")


def compute_dtype(logits: torch.Tensor) -> torch.dtype:
    return torch.promote_types(logits.dtype, torch.float32)


class ChosenLogprobs(torch.autograd.Function):
    """log softmax(logits / temperature) at the chosen tokens, the predictive entropy and the
    normaliser logsumexp(logits / temperature), chunk by chunk. Backward recomputes each chunk's
    softmax from the logits (which the model holds anyway) instead of keeping float32
    probabilities of the whole batch. A given `sum_pi_squared` [B, T] receives sum_v pi_v^2 of
    each position from the same chunks (it has no gradient)."""

    @staticmethod
    def forward(ctx, logits, targets, temperature: float, with_entropy: bool, sum_pi_squared=None):
        # logits [B, T, V] in the model's dtype, targets [B, T] -> chosen [B, T], entropy [B, T]
        # (zeros unless with_entropy), normaliser [B, T], in float32 or the logits' wider dtype
        chosen = torch.empty(targets.shape, dtype=compute_dtype(logits), device=logits.device)
        entropy, normaliser = torch.zeros_like(chosen), torch.empty_like(chosen)
        for rows, positions in chunks(*logits.shape):
            logp = scaled(logits[rows, positions], chosen.dtype, temperature)
            lse = torch.logsumexp(logp, -1)
            logp -= lse[..., None]
            chosen[rows, positions] = logp.gather(-1, targets[rows, positions, None]).squeeze(-1)
            normaliser[rows, positions] = lse
            if with_entropy or sum_pi_squared is not None:
                p = logp.exp()
                if with_entropy:
                    entropy[rows, positions] = -torch.linalg.vecdot(p, logp)
                if sum_pi_squared is not None:
                    sum_pi_squared[rows, positions] = torch.linalg.vecdot(p, p)
        ctx.save_for_backward(logits, targets, normaliser, entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)  # an output the loss does not use gets None, not zeros
        return chosen, entropy, normaliser.clone()  # the saved one must stay unmodified

    @staticmethod
    def backward(ctx, grad_chosen, grad_entropy, grad_normaliser):
        logits, targets, normaliser, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for rows, positions in chunks(*logits.shape):
            logp = scaled(logits[rows, positions], normaliser.dtype, ctx.temperature)
            logp -= normaliser[rows, positions, None]
            # d chosen / dx = onehot - p, d entropy / dx = -p (log p + H) and d normaliser / dx
            # = p, so the gradient is -p * (g_chosen + g_entropy (log p + H) - g_normaliser)
            # plus g_chosen at the chosen token
            p = logp.exp()
            if grad_entropy is None:
                coef = torch.zeros_like(normaliser[rows, positions, None])
            else:
                coef = logp.add_(entropy[rows, positions, None])
                coef *= grad_entropy[rows, positions, None]
            if grad_chosen is not None:
                coef += grad_chosen[rows, positions, None]
            if grad_normaliser is not None:
                coef -= grad_normaliser[rows, positions, None]
            g = p.mul_(coef).neg_()
            if grad_chosen is not None:
                g.scatter_add_(
                    -1, targets[rows, positions, None], grad_chosen[rows, positions, None]
                )
            if ctx.temperature != 1.0:
                g /= ctx.temperature
            grad[rows, positions] = g
        return grad, None, None, None, None


@dataclass
class Gather:
    """Logprobs of more tokens than the sampled one at every position: of `ids` [B, T-1, k]
    when given, else of the model's own `k` most likely tokens (whose ids are then filled in).
    token_logprobs fills `logprobs` [B, T-1, k], with grad when the pass has one."""

    ids: torch.Tensor | None = None
    k: int = 0
    logprobs: torch.Tensor | None = None

    def fill(self, logits: torch.Tensor, targets: torch.Tensor, chosen: torch.Tensor, scale: float):
        # log p(v) = x_v / t - logsumexp = x_v / t - x_a / t + log p(a): the normaliser and its
        # gradient come from `chosen` (chunked), so no full-vocabulary copy is made here
        if self.ids is None:
            self.ids = logits.topk(self.k, dim=-1).indices
        ids = self.ids.to(logits.device)
        shift = (logits.gather(-1, ids) - logits.gather(-1, targets[..., None])).to(chosen.dtype)
        self.logprobs = shift / scale + chosen[..., None]


@dataclass
class LogNormaliser:
    """token_logprobs fills `values` [B, T-1]: each position's logsumexp of the scaled logits,
    with grad when the pass has one (soft Q-learning reads a state's value from it)."""

    values: torch.Tensor | None = None


def scaled(logits: torch.Tensor, dtype: torch.dtype, temperature: float) -> torch.Tensor:
    """A fresh copy of a chunk of logits in `dtype`, divided by the temperature."""
    x = logits.to(dtype, copy=True)
    if temperature != 1.0:
        x /= temperature
    return x


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,  # [B, T]
    attention_mask: torch.Tensor,  # [B, T]
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    sum_pi_squared: torch.Tensor | None = None,
    prompts: Prompts | None = None,
    gather: Gather | None = None,
    normaliser: LogNormaliser | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logprobs [B, T-1] of tokens 1..T-1 under the model (logits scaled like the sampler's),
    and their predictive entropy [B, T-1] when asked (with grad only for an entropy bonus); a
    given `sum_pi_squared` [B, T-1] on the model's device receives sum_v pi_v^2 per position,
    a given `gather` the logprobs of its tokens and a given `normaliser` each position's
    logsumexp. With `prompts` (of these rows; not with `gather`), each shared prompt runs once
    and its columns hold 0."""
    scale = temperature if temperature > 0 else 1.0
    device = model.device
    if prompts is None:
        logits = model(
            input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)
        ).logits
        targets = input_ids[:, 1:].to(device)
        chosen, entropy, lse = ChosenLogprobs.apply(
            logits[:, :-1], targets, scale, with_entropy, sum_pi_squared
        )
        if gather is not None:
            gather.fill(logits[:, :-1], targets, chosen, scale)
    else:
        if gather is not None:  # the packed layout has no [B, T-1] positions to gather at
            raise ValueError("token_logprobs: gather needs prompts=None")
        logits, targets, start, count = shared_logits(model, input_ids, attention_mask, prompts)
        squares = None
        if sum_pi_squared is not None:
            squares = sum_pi_squared.new_zeros(targets.shape)
        chosen, entropy, lse = ChosenLogprobs.apply(logits, targets, scale, with_entropy, squares)
        width = input_ids.shape[1] - 1
        chosen = to_columns(chosen, start, count, width)
        lse = to_columns(lse, start, count, width)
        entropy = to_columns(entropy, start, count, width)
        if squares is not None:
            sum_pi_squared.copy_(to_columns(squares, start, count, width))
    if normaliser is not None:
        normaliser.values = lse
    if not with_entropy:
        return chosen, None
    return chosen, entropy if entropy_grad else entropy.detach()
