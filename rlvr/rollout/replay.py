"""An engine that samples nothing: it answers each prompt with replies logged by an earlier run
(its samples.jsonl) or by anyone, so value-based and filtered-imitation updates train offline."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.rollout.engine import Completion, SamplingParams, is_greedy
from rlvr.rollout.tokens import encode_prompt
from rlvr.types import Problem

UNKNOWN = float("nan")  # the logging policy's logprobs are not in the log


def read_log(path: str) -> list[dict]:
    """Rows of a JSONL log, each with a `prompt` (text or chat messages) and a `response`."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"rollout.replay = '{path}': no such file. Fix: point it at a JSONL log of replies, "
            "e.g. an earlier run's samples.jsonl (written with log.samples_per_step > 0)."
        )
    rows = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}, line {number}: not JSON ({e.msg}). Fix that line.") from e
        if not isinstance(row, dict):
            raise ValueError(
                f"{path}, line {number}: expected a JSON object with 'prompt' and 'response', "
                f"got {type(row).__name__}."
            )
        if missing := [k for k in ("prompt", "response") if k not in row]:
            raise ValueError(
                f"{path}, line {number}: a logged reply needs 'prompt' (text or chat messages) "
                f"and 'response' (text); missing {missing}."
            )
        rows.append(row)
    if not rows:
        raise ValueError(f"rollout.replay = '{path}' holds no replies. Fix: log some first.")
    return rows


class ReplayEngine:
    """Replies from a log instead of the policy. The prompts of one call that are equal get
    distinct logged replies of theirs, in the log's order from an offset drawn by the first one's
    seed (a group of G sees G different replies when its prompt has G or more), so a resumed
    run replays the same ones. A reply ends with EOS unless its log row says it was cut off
    (`finish_reason` 'length'), and is cut to the token budget. Its logprobs are NaN: the
    logging policy's are unknown, so nothing may weight by them."""

    def __init__(self, path: str, tokenizer: PreTrainedTokenizerBase, eos_id: int):
        self.path, self.tokenizer, self.eos_id = path, tokenizer, eos_id
        self.replies: dict[tuple[int, ...], list[tuple[str, bool]]] = defaultdict(list)
        for row in read_log(path):
            prompt = encode_prompt(tokenizer, Problem("", row["prompt"]).messages())
            ended = row.get("finish_reason", "eos") != "length"
            self.replies[tuple(prompt)].append((row["response"], ended))

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        if is_greedy(prompts, params, seeds):
            raise ValueError("the replay engine only stands in for sampling; eval decodes live")
        offsets: dict[tuple[int, ...], int] = {}
        seen: dict[tuple[int, ...], int] = defaultdict(int)
        out = []
        for prompt, seed in zip(prompts, seeds):
            key = tuple(prompt)
            logged = self.replies.get(key)
            if not logged:
                text = self.tokenizer.decode(prompt, skip_special_tokens=True)
                raise KeyError(
                    f"rollout.replay = '{self.path}' logs no reply to the prompt {text[-200:]!r}. "
                    "Fix: replay a log of this task's training prompts, e.g. the samples.jsonl "
                    "of a run with the same task, seed, rollout.batch_size and group_size."
                )
            offset = offsets.setdefault(key, seed % len(logged))
            text, ended = logged[(offset + seen[key]) % len(logged)]
            seen[key] += 1
            out.append(self._completion(text, ended, params.max_new_tokens))
        return out

    def _completion(self, text: str, ended: bool, budget: int) -> Completion:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.eos_id] * ended
        finish = "eos" if ended else "length"
        if len(ids) > budget:
            ids, finish = ids[:budget], "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(ids, [UNKNOWN] * len(ids), finish, text)

    def load_weights(self, model: PreTrainedModel) -> None:
        return None  # the log does not change with the policy

    def release_memory(self) -> None:
        return None
