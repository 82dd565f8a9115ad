"""Fit a task's prompts into the model's context before any work: each prompt that does not fit
stops the run naming its file and line, is dropped, or is cut (task.long_prompts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from rlvr.config import Config, ConfigError
from rlvr.models.loading import load_tokenizer, model_context
from rlvr.models.tiny import CONTEXT, build_tokenizer
from rlvr.rollout.tokens import encode_prompt
from rlvr.tasks.base import Task
from rlvr.types import Message, Problem


class PromptFit:
    """Fits prompts into the model's context minus rollout.max_new_tokens, per
    task.long_prompts: a longer prompt raises (naming its file and line), is dropped, or has
    its longest message cut from the start, keeping the end, where the question usually is."""

    def __init__(self, tokenizer, context: int, cfg: Config, model: str):
        self.tokenizer, self.policy = tokenizer, cfg.task.long_prompts
        self.budget = context - cfg.rollout.max_new_tokens
        self.limits = (
            f"{model!r} holds {context} tokens and rollout.max_new_tokens = "
            f"{cfg.rollout.max_new_tokens} of them are kept for the reply, leaving {self.budget} "
            "for the prompt"
        )
        if self.budget <= 0:
            raise ConfigError(
                f"rollout.max_new_tokens = {cfg.rollout.max_new_tokens} leaves no room for a "
                f"prompt: {model!r} holds {context} tokens. Fix: rollout.max_new_tokens="
                f"{context // 2} or less"
            )
        # A token spells at most its longest vocabulary entry (in bytes for byte-level BPE), so
        # a prompt with more characters than this is too long, and is never tokenised whole.
        self.max_chars = self.budget * max(map(len, tokenizer.get_vocab()))
        self._overheads: dict[tuple[str, ...], int] = {}
        self.checked = self.skipped = self.truncated = 0

    def _tokens(self, messages: list[Message]) -> int | None:
        """Tokens of the rendered prompt; None when its text has more than max_chars."""
        if sum(len(m["content"]) for m in messages) > self.max_chars:
            return None
        return len(encode_prompt(self.tokenizer, messages))

    def _surely_fits(self, messages: list[Message]) -> bool:
        # No tokenizer makes more tokens of a text than its UTF-8 bytes (plus a prefix token),
        # so with the template's own tokens (per sequence of roles) most prompts need no
        # tokenising at all.
        roles = tuple(m["role"] for m in messages)
        if roles not in self._overheads:
            empty = [{"role": role, "content": ""} for role in roles]
            self._overheads[roles] = len(encode_prompt(self.tokenizer, empty))
        text = sum(len(m["content"].encode()) + 2 for m in messages)
        return self._overheads[roles] + text <= self.budget

    def __call__(self, problem: Problem, where: str) -> Problem | None:
        self.checked += 1
        messages = problem.messages()
        if self._surely_fits(messages):
            return problem
        tokens = self._tokens(messages)
        if tokens is not None and tokens <= self.budget:
            return problem
        if self.policy == "error":
            chars = sum(len(m["content"]) for m in messages)
            size = f"{tokens} tokens" if tokens is not None else f"{chars} characters"
            raise ConfigError(
                f"{where}: the prompt is too long ({size}): {self.limits}. Fix: shorten or "
                "remove the row, set task.long_prompts=skip (drop such rows) or "
                "task.long_prompts=truncate (cut them to fit), or lower rollout.max_new_tokens"
            )
        fitted = self._truncate(problem, messages) if self.policy == "truncate" else None
        if fitted is None:
            self.skipped += 1
        else:
            self.truncated += 1
        return fitted

    def _truncate(self, problem: Problem, messages: list[Message]) -> Problem | None:
        """The problem with its longest message cut from the start until the prompt fits; None
        when the other messages alone leave it no room."""
        longest = max(range(len(messages)), key=lambda i: len(messages[i]["content"]))
        content = messages[longest]["content"]
        if sum(len(m["content"]) for m in messages) - len(content) > self.max_chars:
            return None
        ids = self.tokenizer(content[-self.max_chars :], add_special_tokens=False)["input_ids"]
        while True:
            cut = list(messages)
            cut[longest] = {**messages[longest], "content": self.tokenizer.decode(ids)}
            excess = len(encode_prompt(self.tokenizer, cut)) - self.budget
            if excess <= 0:
                prompt = cut[0]["content"] if isinstance(problem.prompt, str) else cut
                return replace(problem, prompt=prompt)
            if excess >= len(ids):
                return None
            # Re-tokenising the cut text can merge differently at the edge, hence the loop.
            ids = ids[excess:]

    def report(self) -> str | None:
        """What was skipped or truncated, for the console; None when every prompt fit."""
        if not (self.skipped or self.truncated):
            return None
        if self.skipped and self.truncated:
            done = f": {self.truncated} truncated, {self.skipped} skipped (no room left to cut)"
        else:
            done = " and were " + ("skipped" if self.skipped else "truncated")
        return (
            f"task.long_prompts={self.policy}: {self.skipped + self.truncated} of {self.checked} "
            f"prompts did not fit{done}; {self.limits}"
        )


def fit_prompts(cfg: Config, task: Task, name: str, say: Callable[[str], None] = print):
    """Fit the prompts of a task that reads files into the context of model `name` ('tiny': the
    embedded model, before its warm start) per task.long_prompts, before any work; returns the
    tokenizer of `name`, loaded to measure them."""
    tiny = name == "tiny"
    tokenizer = build_tokenizer() if tiny else load_tokenizer(name, cfg.model.trust_remote_code)
    if not hasattr(task, "fit_prompts"):
        return tokenizer
    context = CONTEXT if tiny else model_context(name, tokenizer, cfg.model.trust_remote_code)
    if context is None:
        say(f"{name!r} declares no context length, so prompt lengths are not checked")
        return tokenizer
    fit = PromptFit(tokenizer, context, cfg, name)
    try:
        task.fit_prompts(fit)
    except ValueError as e:
        raise ConfigError(f"task '{cfg.task.name}': {e}") from None
    if fit.report():
        say(fit.report())
    return tokenizer
