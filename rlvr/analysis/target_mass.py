"""The probability a model gives a particular reply, log P(reply, then end of turn | prompt):
the base model's coverage of a behaviour, which decides whether sampling can ever find it."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.models.logprobs import token_logprobs
from rlvr.rollout.tokens import Conversation
from rlvr.types import Problem

ROWS_PER_PASS = 32  # bounds the logits of one forward pass


def reply_tokens(
    tokenizer: PreTrainedTokenizerBase, problem: Problem, reply: str
) -> tuple[list[int], list[int]]:
    """(token ids, mask) of the prompt followed by `reply` as one whole assistant turn, laid out
    as a rollout lays it out; the mask is 1 on the reply's tokens and its end-of-turn token."""
    conversation = Conversation(tokenizer, problem.messages())
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    conversation.add_reply(ids + [tokenizer.eos_token_id])
    return conversation.token_ids, conversation.loss_mask


@torch.no_grad()
def reply_logprobs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    replies: list[str],
) -> torch.Tensor:
    """log P(reply_i | prompt_i) [N]: the sum of the reply tokens' logprobs at temperature 1."""
    rows = [reply_tokens(tokenizer, p, r) for p, r in zip(problems, replies, strict=True)]
    out = []
    model.eval()
    for start in range(0, len(rows), ROWS_PER_PASS):
        part = rows[start : start + ROWS_PER_PASS]
        width = max(len(ids) for ids, _ in part)
        input_ids = torch.full((len(part), width), tokenizer.pad_token_id)
        attention = torch.zeros((len(part), width), dtype=torch.long)
        mask = torch.zeros((len(part), width))
        for row, (ids, reply_mask) in enumerate(part):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention[row, : len(ids)] = 1
            mask[row, : len(ids)] = torch.tensor(reply_mask, dtype=torch.float)
        logprobs, _ = token_logprobs(model, input_ids, attention)  # [n, width - 1]
        out.append((logprobs.float().cpu() * mask[:, 1:]).sum(-1))
    return torch.cat(out)


def target_mass(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: list[Problem]
) -> torch.Tensor:
    """log P(reference answer | prompt) [N] of each problem: how much of the model's mass sits on
    replying exactly the answer (for a task whose reply is the bare answer, e.g. target_string)."""
    return reply_logprobs(model, tokenizer, problems, [p.answer or "" for p in problems])
