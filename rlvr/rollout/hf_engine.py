"""The embedded engine: batched KV-cached sampling with any HF causal LM, seeded per sample."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.models.shared_prefix import cache_keyword
from rlvr.rollout.engine import Completion, SamplingParams, is_greedy
from rlvr.rollout.kv_cache import make_room


def sampling_logprobs(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """Log-probabilities of the distribution actually sampled from; filtered tokens get -inf.

    logits: [B, V]. temperature 0 (greedy) leaves the distribution unscaled.
    """
    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    logprobs = F.log_softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_lp, order = logprobs.sort(dim=-1, descending=True)
        mass_before = sorted_lp.exp().cumsum(-1) - sorted_lp.exp()
        drop_sorted = mass_before >= top_p  # always keeps the most likely token
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logprobs = F.log_softmax(logprobs.masked_fill(drop, float("-inf")), dim=-1)
    return logprobs


def eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if i is not None}


class HFEngine:
    """Samples with the training model itself, so weight sync is free (`load_weights` is a no-op)."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_batch_size: int = 256
    ):
        self.model = model
        self.max_batch_size = max_batch_size
        self.tokenizer = tokenizer
        self.eos = torch.tensor(sorted(eos_ids(model, tokenizer)))
        self.pad_id = tokenizer.pad_token_id
        self.cache_arg = cache_keyword(model)

    def load_weights(self, model: PreTrainedModel) -> None:
        return None

    def release_memory(self) -> None:
        return None

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        if not prompts:
            return []
        greedy = is_greedy(prompts, params, seeds)
        if len(prompts) > self.max_batch_size:
            size = self.max_batch_size
            return [
                completion
                for start in range(0, len(prompts), size)
                for completion in self.generate(
                    prompts[start : start + size],
                    params,
                    None if greedy else seeds[start : start + size],
                )
            ]
        was_training = self.model.training
        self.model.eval()
        try:
            tokens, logprobs, finish = self._decode(prompts, params, seeds, greedy)
        finally:
            self.model.train(was_training)
        completions = []
        for row, reason in enumerate(finish):
            n = int((tokens[row] != -1).sum())
            ids = tokens[row, :n].tolist()
            completions.append(
                Completion(
                    token_ids=ids,
                    logprobs=logprobs[row, :n].tolist(),
                    finish_reason=reason,
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                )
            )
        return completions

    def _decode(self, prompts, params: SamplingParams, seeds, greedy: bool):
        """Two savings that leave every sample as it would be alone: each distinct prompt is
        prefilled once and its cache shared by the rows that ask for it (a group's samples),
        and a finished row leaves the decode batch, so a long tail does not keep it padded."""
        device = self.model.device
        distinct: dict[tuple, int] = {}
        source = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts])
        width = max(len(p) for p in distinct)
        input_ids = torch.full((len(distinct), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(distinct), width), dtype=torch.long)
        for row, prompt in enumerate(distinct):  # left padding aligns every last prompt token
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention[row, width - len(prompt) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                         use_cache=True, logits_to_keep=1)  # fmt: skip
        cache, source = getattr(out, self.cache_arg), source.to(device)
        make_room(cache, params.max_new_tokens)
        if len(distinct) < len(prompts):
            cache.batch_select_indices(source)
        logits = out.logits[:, -1][source]
        attention, positions = attention[source], positions[source, -1:]
        generators = None if greedy else [torch.Generator().manual_seed(int(s)) for s in seeds]

        batch = len(prompts)
        tokens = torch.full((batch, params.max_new_tokens), -1, dtype=torch.long)  # -1: none
        logprobs = torch.zeros((batch, params.max_new_tokens))
        finish = ["length"] * batch
        rows = torch.arange(batch)  # the prompts still decoding, in the batch's order
        for t in range(params.max_new_tokens):
            dist = sampling_logprobs(logits, params.temperature, params.top_k, params.top_p)
            if greedy:
                next_tokens = dist.argmax(-1).cpu()
            else:
                # Gumbel-max with a private generator per row: a sample's tokens depend only on
                # its own seed, not on which other prompts share the batch.
                uniform = torch.stack([torch.rand(dist.shape[-1], generator=g) for g in generators])
                gumbel = -torch.log(-torch.log(uniform.clamp(1e-20, 1.0)))
                next_tokens = (dist.cpu() + gumbel).argmax(-1)
            chosen = dist.gather(-1, next_tokens[:, None].to(device)).squeeze(-1).cpu()
            tokens[rows, t], logprobs[rows, t] = next_tokens, chosen
            ended = torch.isin(next_tokens, self.eos)
            for i in ended.nonzero().flatten().tolist():
                finish[rows[i]] = "eos"
            if params.stop:
                for i in (~ended).nonzero().flatten().tolist():
                    # the visible text, as vLLM matches it: a special token's name is no stop
                    text = self.tokenizer.decode(
                        tokens[rows[i], : t + 1].tolist(), skip_special_tokens=True
                    )
                    if any(s in text for s in params.stop):
                        finish[rows[i]], ended[i] = "stop", True
            if bool(ended.all()) or t == params.max_new_tokens - 1:
                break
            if bool(ended.any()):  # finished rows leave the batch, and their cache with them
                keep = (~ended).nonzero().flatten()
                cache.batch_select_indices(keep.to(device))
                rows, next_tokens = rows[keep], next_tokens[keep]
                attention, positions = attention[keep.to(device)], positions[keep.to(device)]
                if generators is not None:
                    generators = [generators[i] for i in keep.tolist()]
            attention = torch.cat(
                [attention, torch.ones((len(rows), 1), dtype=attention.dtype, device=device)], -1
            )
            positions = positions + 1
            out = self.model(input_ids=next_tokens[:, None].to(device), attention_mask=attention,
                             position_ids=positions, use_cache=True, logits_to_keep=1,
                             **{self.cache_arg: cache})  # fmt: skip
            cache, logits = getattr(out, self.cache_arg), out.logits[:, -1]
        return tokens, logprobs, finish
