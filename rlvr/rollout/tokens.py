"""The one token layer of multi-turn episodes: a conversation kept as token ids from start to end.

The policy's own tokens are never re-tokenised: a reply enters the episode exactly as it was
sampled, and only those tokens are in the loss mask. Everything between two replies (the end of
the assistant turn, the observation or tool result, the next generation prompt) comes from the
chat template, by this rule:

    delta = what the template renders after the content of the last assistant message, in the
            whole conversation with the observation added and the generation prompt on,
            less the end-of-turn tokens the reply already ends with.

To find where the assistant content ends, the conversation is rendered once with a unique
placeholder as that message's content; the delta is the text after the placeholder, tokenised on
its own (it starts right after the reply, and a template's turn delimiters are special tokens, so
nothing merges across the boundary). A reply cut short (no end-of-turn token) is closed by the
template's own end-of-turn text; a reply that stopped on a token the template does not close
turns with (e.g. Llama 3's <|end_of_text|> where it writes <|eot_id|>) keeps it, followed by the
template's whole closing. What a re-rendering from messages would change in a reply stays as
sampled: special tokens inside it, whitespace a template trims (Llama 3), earlier thinking.

So the prompt of turn k+1 is always the tokens of turn k plus the delta: the episode is exactly
what the policy conditioned on while it generated each turn. This also holds for templates that
are not append-only, the common case being reasoning templates (Qwen3, DeepSeek-R1, Qwen3.5)
that drop the <think> block of earlier assistant turns once a later user message exists:
re-rendering the history would remove tokens the policy generated and saw, and the episode would
no longer be one sequence. rlvr keeps the earlier thinking in context as generated (as SkyRL's
qwen3_acc_thinking template does for the same reason); the cost is longer contexts than a chat
front-end would build, which `max_total_tokens` bounds. The delta itself is the template's own
rendering of the observation turn, so the observation looks the same as in any other use.

Tools are part of the rendering, decided here and nowhere else. An env with tools exposes them
as `tool_schemas` (OpenAI-style function schemas), and the Conversation passes them to every
rendering (prompt, placeholder and observation renderings alike). A template that renders tools
itself (`renders_tools`: given a probe tool, its output shows it; Qwen2.5's <tools> block, Llama
3.1's JSON function list) gets them as `apply_chat_template(tools=...)`, so the model sees its
tools, and is asked for calls, the way its template was made to. Any other template (the tiny
model's, Llama 3's, one with its tool block cut out) renders the messages with rlvr's own
description of the tagged `<tool_call>` format first in the system message
(`rlvr.envs.tools.describe_tools`). The env's messages are the same either way: `messages` never
holds the description. ToolEnv reads two native call formats, Hermes `<tool_call>` tags (Qwen)
and Llama 3.1's bare JSON; a model whose template asks for another (Mistral's [TOOL_CALLS], for
one) gets its tools natively, but its calls read as answers.

`TemplateError` is raised only when no correct delta exists: the template does not render the
assistant content verbatim exactly once (so where it ends cannot be found), or what it renders
after the assistant message changes with that message's content (the rendering with the real
reply does not end with the same text).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerBase

from rlvr.types import Message

# Stands in for the last reply's content when locating the end of the assistant message.
_PLACEHOLDER = "[[rlvr:reply-placeholder]]"  # no whitespace: templates may trim content

Tools = list[dict[str, Any]]  # OpenAI-style function schemas, as apply_chat_template takes them

_PROBE_NAME = "rlvr_probe_tool"
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _PROBE_NAME,
            "description": "Checks whether the chat template renders tools.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]
_RENDERS_TOOLS: dict[str, bool] = {}  # chat template source -> whether it renders tools


class TemplateError(ValueError):
    """No correct token delta can be derived from the chat template for the next turn."""


def renders_tools(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the chat template renders tools itself: a conversation rendered with a probe tool
    shows the tool's name (a template without tool support ignores `tools`; one that raises on
    them counts as without). Cached per template source."""
    key = repr(tokenizer.chat_template)
    if key not in _RENDERS_TOOLS:
        probe = [{"role": "user", "content": "hi"}]
        try:
            text = tokenizer.apply_chat_template(
                probe, tools=_PROBE_TOOLS, tokenize=False, add_generation_prompt=True
            )
        except Exception:  # e.g. raise_exception("tools are not supported")
            text = ""
        _RENDERS_TOOLS[key] = _PROBE_NAME in text
    return _RENDERS_TOOLS[key]


def with_tool_description(messages: list[Message], tools: Tools) -> list[Message]:
    """`messages` with rlvr's description of `tools` and the tagged call format first in the
    system message (a new one when there is none): tools for templates that cannot render them."""
    # Imported here: rlvr.envs imports modules (rewards) that import this one.
    from rlvr.envs.tools import describe_tools

    text = describe_tools(tools)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{text}\n\n{messages[0]['content']}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def render(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[Message],
    generation_prompt: bool,
    tools: Tools | None = None,
) -> str:
    """The chat template's text of `messages`, with `tools` shown natively where the template
    can, else described in the system message (see the module docstring)."""
    if tools and renders_tools(tokenizer):
        return tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
        )
    if tools:
        messages = with_tool_description(messages, tools)
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, messages: list[Message], tools: Tools | None = None
) -> list[int]:
    """Token ids of a conversation ready for the assistant to reply (the template adds BOS if any)."""
    text = render(tokenizer, messages, True, tools)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@dataclass
class Conversation:
    """Token ids, loss mask and behaviour logprobs of one episode, aligned per token, with the
    messages they render; `turn_ends[k]` is one past the last policy token of turn k. `tools`
    (the env's `tool_schemas`) goes to every rendering, natively or described (module docstring)."""

    tokenizer: PreTrainedTokenizerBase
    messages: list[Message]
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    replies: list[list[int]] = field(default_factory=list)
    tools: Tools | None = None
    untrained: int = 0  # reply tokens left out of loss_mask by `trained`

    def __post_init__(self):
        if not self.token_ids:
            self.token_ids = encode_prompt(self.tokenizer, self.messages, self.tools)
        self.loss_mask = [0] * len(self.token_ids)
        self.logprobs = [0.0] * len(self.token_ids)

    def add_reply(
        self,
        token_ids: list[int],
        logprobs: list[float] | None = None,
        trained: list[int] | None = None,
    ) -> None:
        """The policy's tokens, exactly as generated (EOS included when it stopped there);
        `trained` masks the ones the update should not train on (default: it trains on all)."""
        self.token_ids = self.token_ids + token_ids
        mask = [1] * len(token_ids) if trained is None else trained
        self.loss_mask = self.loss_mask + mask
        self.untrained += len(token_ids) - sum(mask)
        self.logprobs = self.logprobs + (logprobs or [0.0] * len(token_ids))
        self.turn_ends.append(len(self.token_ids))
        self.replies.append(token_ids)

    def observation_delta(self, observation: Message | list[Message]) -> tuple[str, list[Message]]:
        """The text that follows the last reply when `observation` comes next (see the module
        docstring), and the messages of the conversation with the reply and observation added."""
        tokenizer, reply_ids = self.tokenizer, self.replies[-1]
        added = observation if isinstance(observation, list) else [observation]
        reply = tokenizer.decode(reply_ids, skip_special_tokens=True)
        messages = [*self.messages, {"role": "assistant", "content": reply}, *added]
        marked = render(
            tokenizer,
            [*self.messages, {"role": "assistant", "content": _PLACEHOLDER}, *added],
            True,
            self.tools,
        )
        if marked.count(_PLACEHOLDER) != 1:
            raise TemplateError(
                "the chat template does not render an assistant message's content verbatim "
                "exactly once, so where a reply ends in the next prompt cannot be found. Fix: "
                "use a template that writes the assistant content as given, or a single-turn task."
            )
        closing = marked.split(_PLACEHOLDER)[1]
        if not render(tokenizer, messages, True, self.tools).endswith(closing):
            raise TemplateError(
                "the chat template renders what follows an assistant message differently "
                "depending on that message's content, so the tokens between turns are not "
                "well defined. Fix: use a template whose turn delimiters do not depend on the "
                "reply, or a single-turn task."
            )
        # The reply's trailing special tokens that begin the closing (e.g. the <|im_end|> the
        # policy stopped on) are already in the episode.
        special = set(tokenizer.all_special_ids)
        start = len(reply_ids)
        while start and reply_ids[start - 1] in special:
            start -= 1
        for first in range(start, len(reply_ids)):
            already = tokenizer.decode(reply_ids[first:])
            if closing.startswith(already):
                return closing[len(already) :], messages
        return closing, messages

    def add_observation(
        self, observation: Message | list[Message], max_total_tokens: int = 0
    ) -> bool:
        """Append what follows the last reply when `observation` comes next (the rest of the
        assistant turn, the observation, the next generation prompt), never trained on.
        Returns False, appending nothing, when that would reach `max_total_tokens` (0: no cap)."""
        text, messages = self.observation_delta(observation)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if max_total_tokens and len(self.token_ids) + len(ids) >= max_total_tokens:
            return False
        self.messages = messages
        self.token_ids = self.token_ids + ids
        self.loss_mask = self.loss_mask + [0] * len(ids)
        self.logprobs = self.logprobs + [0.0] * len(ids)
        return True
