"""Conformance of the multi-turn token layer with real chat templates and real BPE tokenizers.

The tokenizers are tiny byte-level BPEs trained here (no hub access) with the pre-tokenizer
regex and special tokens of each family, so merges happen exactly where they would with the
real ones; the chat templates are those families' templates, written out below.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass
from functools import partial

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rlvr.algos.losses import LOSSES
from rlvr.config import Config
from rlvr.envs import tool_env
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.envs.tools import Calculator
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.rewards import REWARDS, score_safely
from rlvr.rollout import Completion, EpisodeRunner, HFEngine, SamplingParams
from rlvr.rollout.tokens import Conversation, TemplateError, encode_prompt, render, renders_tools
from rlvr.tasks.search_qa import SearchQAParams, SearchQATask
from rlvr.train.update import UpdateInputs, micro_batch_loss
from rlvr.train.warmstart import sft_example
from rlvr.types import Batch, Problem, StepResult, Trajectory

# ---------------------------------------------------------------- tokenizers and templates

# Qwen2 / Llama 3 pre-tokenizer regex: newlines group ("\s*[\r\n]+"), so "assistant\n" followed
# by a reply that starts with "\n" re-tokenises into one "\n\n" token.
SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
WORDS = (
    "the answer is let me think about it step by step first plus then double times hello world "
    "sure here result you asked for should call calculator tool with numbers okay says so final "
    "we add and to get minus now again go on done be brief what bye there user assistant system "
    "question reply turn model reason check compute value number sum product list total count "
    "because which would could other after before small large every"
).split()


def corpus() -> list[str]:
    """English words, digits and newline runs: enough for a few hundred merges, "\n\n" included."""
    rng = random.Random(0)
    lines = []
    for _ in range(400):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
        end = rng.choice(["\n", "\n\n", "\n\n\n", ". ", "! "])
        lines.append(f"{words.capitalize()} {rng.randint(0, 999)}{end}")
    return lines


QWEN_ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def bpe_tokenizer(specials: list[str], added: list[str] = (), **roles) -> PreTrainedTokenizerFast:
    """A byte-level BPE (a few hundred merges) with the family's special tokens."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=256 + len(specials) + 400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus(), trainer)
    named = set(roles.values())
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        additional_special_tokens=[s for s in specials if s not in named],
        **roles,
    )
    tokenizer.add_tokens(list(added))  # Qwen's <think>, <tool_call>, ... are not special
    return tokenizer


# Qwen2.5-Instruct's template: default system prompt, the <tools> block when given tools,
# `tool` messages grouped into one user turn.
QWEN25_TEMPLATE = r"""
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# Meta-Llama-3-Instruct's template (content is trimmed; BOS comes from the template).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

# Llama 3.1-Instruct's template (meta-llama/Llama-3.1-8B-Instruct, revision 0e9e39f): with
# `tools` (or `custom_tools`) it adds "Environment: ipython" and lists the tools as indented JSON
# in the first user turn; a call is the JSON {"name": ..., "parameters": ...}; `tool` and
# `ipython` results both become an ipython turn, their content written with tojson.
LLAMA31_TEMPLATE = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Qwen3's template (tools header left out): the <think> block of an assistant turn is kept only
# after the last real user query (tool responses do not count as one); earlier assistant turns
# are rendered without it, so a new user message rewrites the history. Not append-only.
QWEN3_TEMPLATE = r"""
{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]
LLAMA31_SPECIALS = [*LLAMA3_SPECIALS, "<|eom_id|>", "<|python_tag|>"]


@dataclass
class Family:
    tokenizer: PreTrainedTokenizerFast
    end_of_turn: str  # what the template writes after an assistant's content
    after_eos: str  # the part of it after the EOS a reply stops on
    user_header: str  # an observation turn from the user: header + content + ...
    user_footer: str  # ... + footer, generation prompt included

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def reply(self, *pieces: str, eos: bool = True) -> list[int]:
        """Token ids a model could generate: each piece tokenised on its own (one piece is the
        canonical tokenisation), then EOS unless the reply was cut by max_new_tokens."""
        ids = [i for piece in pieces for i in self.ids(piece)]
        return ids + [self.tokenizer.eos_token_id] if eos else ids

    def user_delta(self, observation: str, reply: list[int]) -> str:
        """The template's rendering of a user observation turn, after the reply's own tokens."""
        ended = reply[-1] == self.tokenizer.eos_token_id
        close = self.after_eos if ended else self.end_of_turn
        return close + self.user_header + observation + self.user_footer


def make_family(name: str) -> Family:
    chatml = ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
    if name == "tiny":
        return Family(build_tokenizer(), "<|end|>", "", "<|user|>", "<|end|><|assistant|>")
    if name in ("llama3", "llama31"):
        tokenizer = bpe_tokenizer(
            LLAMA3_SPECIALS if name == "llama3" else LLAMA31_SPECIALS,
            bos_token="<|begin_of_text|>",
            eos_token="<|eot_id|>",
            pad_token="<|end_of_text|>",
        )
        tokenizer.chat_template = LLAMA3_TEMPLATE if name == "llama3" else LLAMA31_TEMPLATE
        header = "<|start_header_id|>user<|end_header_id|>\n\n"
        footer = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        return Family(tokenizer, "<|eot_id|>", "", header, footer)
    added = QWEN_ADDED + (["<think>", "</think>"] if name == "qwen3" else [])
    tokenizer = bpe_tokenizer(
        CHATML_SPECIALS, added, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = QWEN3_TEMPLATE if name == "qwen3" else QWEN25_TEMPLATE
    return Family(tokenizer, "<|im_end|>\n", "\n", *chatml)


FAMILIES = {name: make_family(name) for name in ("chatml", "llama3", "llama31", "qwen3", "tiny")}


# ---------------------------------------------------------------- episodes turn by turn


@dataclass
class Played:
    conversation: Conversation
    prompts: list[list[int]]  # what the policy was given before each turn
    replies: list[list[int]]
    messages: list[dict]  # the conversation as messages, built here (not by Conversation)


def play(family: Family, first: list[dict], turns: list[tuple[list[int], object]]) -> Played:
    """Generate turn by turn: each turn's reply ids, then its observation (None: last turn)."""
    conversation = Conversation(family.tokenizer, copy.deepcopy(first))
    prompts, replies, messages = [], [], copy.deepcopy(first)
    for reply, observation in turns:
        prompts.append(list(conversation.token_ids))
        conversation.add_reply(reply)
        replies.append(reply)
        text = family.tokenizer.decode(reply, skip_special_tokens=True)
        messages.append({"role": "assistant", "content": text})
        if observation is not None:
            assert conversation.add_observation(observation)
            messages += observation if isinstance(observation, list) else [observation]
    return Played(conversation, prompts, replies, messages)


def check_policy_spans(played: Played) -> None:
    """Each reply sits verbatim right after the prompt it was generated from; the loss mask is
    1 exactly there; turn_ends point one past each reply; each prompt extends the last turn."""
    c = played.conversation
    mask = [0] * len(c.token_ids)
    ends = []
    for k, (prompt, reply) in enumerate(zip(played.prompts, played.replies)):
        start = len(prompt)
        assert c.token_ids[:start] == prompt
        assert c.token_ids[start : start + len(reply)] == reply
        mask[start : start + len(reply)] = [1] * len(reply)
        ends.append(start + len(reply))
        if k + 1 < len(played.prompts):
            assert played.prompts[k + 1][: start + len(reply)] == prompt + reply
    assert c.loss_mask == mask
    assert c.turn_ends == ends
    assert len(c.logprobs) == len(c.token_ids)


def user(content: str) -> dict:
    return {"role": "user", "content": content}


def tool(content: str) -> dict:
    return {"role": "tool", "content": content}


# Canonical replies (tokenised as a whole, as a model that samples the tokeniser's own merges
# would emit them), with user and tool observations and a reply cut by max_new_tokens.
CALL = '<tool_call>\n{"name": "mul", "arguments": {"a": 42, "b": 2}}\n</tool_call>'
SCENARIOS = {
    "chatml": lambda f: (
        [user("What is 12 plus 30?")],  # no system message: the default one is rendered
        [
            (f.reply("The answer is 42."), user("Now double it.")),
            (f.reply(CALL), [tool("84"), tool("exact")]),  # two results, one user turn
            (f.reply("Okay, the tool says", eos=False), user("Go on.")),  # cut short
            (f.reply("84."), None),
        ],
    ),
    "llama3": lambda f: (
        [{"role": "system", "content": "Be brief."}, user("What is 12 plus 30?")],
        [
            (f.reply("The answer is 42."), user("Now double it.")),
            (f.reply("I should call the calculator", eos=False), {"role": "ipython", "content": "84"}),
            (f.reply("84."), None),
        ],
    ),
    "tiny": lambda f: (
        [user("12+30=")],
        [
            (f.reply("42"), user("x2=")),
            (f.reply("8", eos=False), user("and?")),
            (f.reply("84"), None),
        ],
    ),
    # Tool results only: Qwen3 keeps every <think> after the last user query, so here it is
    # append-only and the whole rendering is a well-defined target.
    "qwen3": lambda f: (
        [user("What is 42 times 2?")],
        [
            (f.reply("<think>\nI should call the calculator tool.\n</think>\n\n" + CALL), tool("84")),
            (f.reply("<think>\nOkay, the tool says 84.\n</think>\n\nThe answer is 84."), None),
        ],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", SCENARIOS)
def test_episode_tokens_equal_the_templates_rendering_of_the_whole_conversation(name):
    family = FAMILIES[name]
    played = play(family, *SCENARIOS[name](family))
    check_policy_spans(played)
    c, last = played.conversation, played.replies[-1]
    rendered = family.tokenizer.apply_chat_template(played.messages, tokenize=False)
    # The template closes the last turn after the reply; the policy has generated up to there.
    closing = family.after_eos if last[-1] == family.tokenizer.eos_token_id else family.end_of_turn
    assert family.ids(rendered) == c.token_ids + family.ids(closing)
    assert c.messages == played.messages[:-1]


# Replies a model can emit that the template's rendering would tokenise differently: one that
# starts with "\n" right after the generation prompt's "\n" (re-tokenised: one "\n\n" token),
# one split off the tokeniser's merges ("hel" "lo world" instead of "hello world"), and (Llama 3,
# whose template trims content) one with leading and trailing whitespace.
@pytest.mark.parametrize("name", ["chatml", "llama3", "qwen3"])
def test_replies_are_never_retokenised(name):
    family = FAMILIES[name]
    turns = [
        (family.reply("\n", "The answer is 42."), user("Again?")),
        (family.reply("hel", "lo world", eos=False), user("Now double it.")),
        (family.reply("\n", " Sure, 84. \n"), None),
    ]
    played = play(family, [user("What is 12 plus 30?")], turns)
    check_policy_spans(played)
    c, tok = played.conversation, family.tokenizer
    observations = ["Again?", "Now double it."]
    for k, observation in enumerate(observations):
        delta = played.prompts[k + 1][c.turn_ends[k] :]
        assert delta == family.ids(family.user_delta(observation, played.replies[k]))
    # The policy's tokens differ from what re-tokenising the same text gives: a layer that
    # re-encoded the conversation would train on tokens the policy never sampled.
    assert family.ids(tok.decode(c.token_ids)) != c.token_ids
    text = tok.decode(played.prompts[0])
    for k, reply in enumerate(played.replies):
        text += tok.decode(reply)
        if k < len(observations):
            text += family.user_delta(observations[k], reply)
    assert tok.decode(c.token_ids) == text


def test_tiny_template_is_append_only_character_by_character():
    family = FAMILIES["tiny"]
    played = play(family, *SCENARIOS["tiny"](family))
    assert family.tokenizer.decode(played.conversation.token_ids) == (
        "<|bos|><|user|>12+30=<|end|><|assistant|>42<|end|><|user|>x2=<|end|><|assistant|>8<|end|>"
        "<|user|>and?<|end|><|assistant|>84<|end|>"
    )


def test_special_tokens_sampled_inside_a_reply_are_kept():
    # An untrained or drifting policy samples template tokens mid-reply; the text-prefix check
    # of a re-rendering layer fails on them (they vanish from the decoded content) and crashes
    # the run. They are the policy's tokens: kept, trained on, and the next turn goes on.
    family = FAMILIES["tiny"]
    tok = family.tokenizer
    stray, eos = tok.convert_tokens_to_ids("<|user|>"), tok.eos_token_id
    turns = [
        (family.ids("4") + [stray] + family.ids("2") + [eos], user("a")),
        (family.ids("8") + [stray, eos], user("b")),  # stops right after a stray token
        (family.ids("8") + [stray], user("c")),  # cut right after one: the template closes it
        (family.reply("84"), None),
    ]
    played = play(family, [user("12+30=")], turns)
    check_policy_spans(played)
    c = played.conversation
    deltas = [tok.decode(played.prompts[k + 1][c.turn_ends[k] :]) for k in range(3)]
    assert deltas == [
        "<|user|>a<|end|><|assistant|>",
        "<|user|>b<|end|><|assistant|>",
        "<|end|><|user|>c<|end|><|assistant|>",
    ]


# ---------------------------------------------------------------- a template that is not append-only

THINK_1 = "<think>\nLet me think step by step: 12 plus 30 is 42.\n</think>\n\nThe answer is 42."
THINK_2 = "<think>\nI should call the calculator tool.\n</think>\n\n" + CALL
THINK_3 = "<think>\nOkay, the tool says 84, so"  # cut by max_new_tokens inside the thinking


def test_thinking_template_keeps_the_tokens_the_policy_saw():
    family = FAMILIES["qwen3"]
    tok = family.tokenizer
    first = [user("What is 12 plus 30?")]
    turns = [
        (family.reply(THINK_1), user("Now double it.")),
        (family.reply(THINK_2), tool("84")),
        (family.reply(THINK_3, eos=False), user("Go on.")),
        (family.reply("<think>\nDone.\n</think>\n\n84."), None),
    ]
    played = play(family, first, turns)
    check_policy_spans(played)
    c = played.conversation

    # Evidence that the template is not append-only: with a later user message it renders the
    # first assistant turn without its thinking, so the policy's prompt of turn 2 is not a
    # prefix-extension of turn 1 when rebuilt from messages.
    history = [*first, {"role": "assistant", "content": THINK_1}, user("Now double it.")]
    rerendered = render(tok, history, True)
    assert not rerendered.startswith(render(tok, first, True) + THINK_1)
    assert (
        "Let me think" not in rerendered
        and "<|im_start|>assistant\nThe answer is 42." in rerendered
    )

    # The prompt of each turn is the previous turn's tokens plus the observation delta, and the
    # delta is the template's own rendering of that observation turn.
    ends_with_eos = [True, True, False]
    expected_deltas = [
        "\n<|im_start|>user\nNow double it.<|im_end|>\n<|im_start|>assistant\n",
        "\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
        "<|im_end|>\n<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n",
    ]
    observations = [t[1] for t in turns[:-1]]
    messages = list(first)
    for k, (reply, observation) in enumerate(turns[:-1]):
        text = tok.decode(reply, skip_special_tokens=True)
        messages += [{"role": "assistant", "content": text}, observation]
        delta = played.prompts[k + 1][c.turn_ends[k] :]
        assert played.prompts[k + 1] == played.prompts[k] + reply + delta
        assert tok.decode(delta) == expected_deltas[k]
        assert delta == family.ids(expected_deltas[k])
        own = render(tok, messages, True)  # the template's rendering with this observation
        before_delta = "<|im_end|>" if ends_with_eos[k] else text.split("</think>")[-1]
        assert own.endswith(before_delta + expected_deltas[k]), observations[k]

    # Earlier thinking stays in context as generated: more tokens than the template's rendering.
    assert all(c.token_ids[e - len(r) : e] == r for r, e in zip(played.replies, c.turn_ends))
    assert len(c.token_ids) > len(
        family.ids(tok.apply_chat_template(played.messages, tokenize=False))
    )


def test_llama3_reply_that_stopped_on_another_eos_keeps_it_and_gets_the_templates_closing():
    family = FAMILIES["llama3"]
    tok = family.tokenizer
    end_of_text = tok.convert_tokens_to_ids("<|end_of_text|>")
    played = play(
        family,
        [user("Hi")],
        [(family.ids("Hello there!") + [end_of_text], user("Bye")), (family.reply("Bye."), None)],
    )
    check_policy_spans(played)
    assert tok.decode(played.conversation.token_ids).startswith(
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello there!<|end_of_text|><|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
    )


@pytest.mark.parametrize(
    "template, problem",
    [
        (  # assistant messages are not rendered at all
            "{% for m in messages %}{% if m.role != 'assistant' %}"
            "{{ '<|' + m.role + '|>' + m.content + '<|end|>' }}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}",
            "exactly once",
        ),
        (  # how an assistant turn ends depends on what it says
            "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content }}"
            "{% if m.content.endswith('?') %}{{ '<|system|>' }}{% else %}{{ '<|end|>' }}"
            "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}",
            "depending on that message's content",
        ),
    ],
)
def test_template_error_only_when_no_correct_delta_exists(template, problem):
    tok = build_tokenizer()
    tok.chat_template = template
    conversation = Conversation(tok, [user("hi")])
    conversation.add_reply(tok("why?", add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    with pytest.raises(TemplateError, match=problem) as error:
        conversation.add_observation(user("because"))
    assert "Fix:" in str(error.value)


# ---------------------------------------------------------------- observation tokens get no gradient


def test_observation_and_prompt_tokens_get_exactly_zero_gradient():
    family = FAMILIES["tiny"]
    tok = family.tokenizer
    model = build_model("nano", tok, seed=0)
    episodes = [
        SCENARIOS["tiny"](family),  # three turns, one cut short
        ([user("7*6=")], [(family.reply("42"), user("ok")), (family.reply("!"), None)]),
    ]
    trajectories = []
    for i, (first, turns) in enumerate(episodes):
        c = play(family, first, turns).conversation
        trajectories.append(
            Trajectory(
                problem=Problem(str(i), "p"),
                group_id=i,
                sample_index=i,
                token_ids=c.token_ids,
                loss_mask=c.loss_mask,
                behaviour_logprobs=c.logprobs,
                turn_rewards=[1.0] * len(c.turn_ends),
                turn_ends=c.turn_ends,
            )
        )
    batch = Batch.from_trajectories(trajectories, tok.pad_token_id)
    assert len(trajectories[0].token_ids) != len(trajectories[1].token_ids)  # padding included
    for row, t in enumerate(trajectories):  # column j describes token j+1
        assert batch.loss_mask[row, : len(t.token_ids) - 1].tolist() == t.loss_mask[1:]

    captured = {}

    def keep_logits(module, args, output):
        output.retain_grad()
        captured["logits"] = output

    hook = model.lm_head.register_forward_hook(keep_logits)
    try:
        data = UpdateInputs(batch, torch.ones_like(batch.loss_mask), None, None)
        cfg = Config()
        loss, _ = micro_batch_loss(
            model, data, torch.arange(len(batch)), len(batch), float(batch.loss_mask.sum()),
            cfg, LOSSES[cfg.algo.loss], None,
        )  # fmt: skip
        loss.backward()
    finally:
        hook.remove()
    per_position = captured["logits"].grad.abs().sum(-1)  # [B, T]: position t predicts t+1
    width = per_position.shape[1]
    predicts_policy_token = torch.zeros_like(per_position, dtype=torch.bool)
    predicts_policy_token[:, : width - 1] = batch.loss_mask[:, : width - 1].bool()
    assert (per_position[~predicts_policy_token] == 0).all()
    assert (per_position[predicts_policy_token] > 0).all()
    assert int(predicts_policy_token.sum()) == sum(t.num_generated for t in trajectories)


# ---------------------------------------------------------------- tools: the template's own, or described

TOOL_PROBLEM = Problem("calc", "What is 12 plus 30? End with #### answer.", answer="42")
TAGGED_CALL = (
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 30"}}\n</tool_call>'
)
LLAMA_CALL = '{"name": "calculator", "parameters": {"expression": "12 + 30"}}'
ANSWER = "12 plus 30 is 42. #### 42"
NATIVE_CALLS = {"chatml": TAGGED_CALL, "llama31": LLAMA_CALL}  # each family's own call format
# How each template lists a tool (transformers' tojson is json.dumps), and writes its result.
NATIVE_LISTINGS = {
    "chatml": lambda schema: f"<tools>\n{json.dumps(schema)}\n</tools>",
    "llama31": lambda schema: f"{json.dumps(schema, indent=4)}\n\n{TOOL_PROBLEM.prompt}<|eot_id|>",
}
RESULT_TURNS = {
    "chatml": "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n",
    "llama31": '<|start_header_id|>ipython<|end_header_id|>\n\n"42"<|eot_id|>'
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
}


def calculator_env() -> tool_env.ToolEnv:
    exact = partial(score_safely, REWARDS["exact"])
    return tool_env.ToolEnv(SingleTurnEnv(exact, exact), [Calculator()])


def play_env(family: Family, env, replies: list[list[int]]) -> tuple[Played, StepResult]:
    """Drive `env` with the replies' tokens as the runner does: the env reads the text an engine
    decodes, and the Conversation, opened with the env's tools, takes its observations."""
    messages = env.reset(TOOL_PROBLEM)
    conversation = Conversation(family.tokenizer, copy.deepcopy(messages), tools=env.tool_schemas)
    prompts = []
    for reply in replies:
        prompts.append(list(conversation.token_ids))
        conversation.add_reply(reply)
        text = family.tokenizer.decode(reply, skip_special_tokens=True)
        messages.append({"role": "assistant", "content": text})
        step = env.step(text)
        if not step.done:
            assert conversation.add_observation(step.observation)
            messages.append(step.observation)
    return Played(conversation, prompts, list(replies), messages), step


def test_which_templates_render_tools_themselves():
    assert {name: renders_tools(f.tokenizer) for name, f in FAMILIES.items()} == {
        "chatml": True,  # Qwen2.5's <tools> block
        "llama3": False,
        "llama31": True,  # JSON function list in the first user turn
        "qwen3": False,  # its tools header is left out above
        "tiny": False,
    }


def test_a_template_that_refuses_tools_gets_them_described():
    tok = build_tokenizer()
    tok.chat_template = (
        "{% if tools %}{{ raise_exception('no tools') }}{% endif %}" + tok.chat_template
    )
    env = calculator_env()
    assert not renders_tools(tok)
    system = {"role": "system", "content": tool_env.describe([Calculator()])}
    described = [system, *TOOL_PROBLEM.messages()]
    assert render(tok, TOOL_PROBLEM.messages(), True, env.tool_schemas) == render(
        tok, described, True
    )


@pytest.mark.parametrize("name", ["chatml", "llama31"])
def test_native_tool_episode_equals_the_templates_rendering_with_tools(name):
    family, env = FAMILIES[name], calculator_env()
    tok, schemas = family.tokenizer, env.tool_schemas
    played, last = play_env(family, env, [family.reply(NATIVE_CALLS[name]), family.reply(ANSWER)])
    check_policy_spans(played)  # the loss mask covers exactly the two replies
    assert last.done and last.reward == 1.0 and last.info["correct"]
    c = played.conversation
    assert c.messages == played.messages[:-1]

    # The prompt, every turn's delta and so the whole episode are the template's rendering with
    # tools=: turn by turn equals the whole conversation, closed after the last reply.
    prompt = tok.apply_chat_template(
        played.messages[:1], tools=schemas, tokenize=False, add_generation_prompt=True
    )
    assert played.prompts[0] == family.ids(prompt)
    assert tok.decode(played.prompts[1][c.turn_ends[0] :]) == RESULT_TURNS[name]
    rendered = tok.apply_chat_template(played.messages, tools=schemas, tokenize=False)
    assert family.ids(rendered) == c.token_ids + family.ids(family.after_eos)

    # The tool is listed once, as the template writes it, and rlvr's description is nowhere.
    text = tok.decode(c.token_ids)
    assert text.count(NATIVE_LISTINGS[name](schemas[0])) == 1
    assert text.count('"description": "Evaluate an arithmetic expression') == 1
    assert "Call a tool by replying" not in text and "calculator(expression" not in text


def test_llama31_call_after_python_tag_that_stopped_on_eom_is_kept_as_sampled():
    # With tools, Llama 3.1's system turn says "Environment: ipython": the model may open a call
    # with <|python_tag|> and end it with <|eom_id|>. Both stay in the episode as sampled; the
    # env reads the call from the decoded text; the template then closes the turn its own way.
    family = FAMILIES["llama31"]
    tok = family.tokenizer
    tag, eom = tok.convert_tokens_to_ids(["<|python_tag|>", "<|eom_id|>"])
    call = [tag, *family.ids(LLAMA_CALL), eom]
    played, last = play_env(family, calculator_env(), [call, family.reply(ANSWER)])
    check_policy_spans(played)
    assert last.done and last.info["correct"]
    c = played.conversation
    assert "Environment: ipython\n" in tok.decode(played.prompts[0])
    delta = tok.decode(played.prompts[1][c.turn_ends[0] :])
    assert delta == "<|eot_id|>" + RESULT_TURNS["llama31"]


@pytest.mark.parametrize("name", ["llama3", "qwen3", "tiny"])
def test_templates_without_tool_support_get_the_tools_described_in_the_system_message(name):
    family, env = FAMILIES[name], calculator_env()
    tok = family.tokenizer
    # Qwen3 renders a <think> block on the last turn: its replies think, so rendering agrees.
    think = "<think>\nI should call the calculator tool.\n</think>\n\n" if name == "qwen3" else ""
    replies = [family.reply(think + TAGGED_CALL), family.reply(think + ANSWER)]
    played, last = play_env(family, env, replies)
    check_policy_spans(played)
    assert last.done and last.info["correct"]
    c = played.conversation
    assert c.messages == played.messages[:-1]  # the description is rendering, not a message
    system = {"role": "system", "content": tool_env.describe([Calculator()])}
    rendered = tok.apply_chat_template([system, *played.messages], tokenize=False)
    assert family.ids(rendered) == c.token_ids + family.ids(family.after_eos)
    assert tok.decode(c.token_ids).count("calculator(expression: string): Evaluate") == 1


class ScriptedReplies:
    """An engine that replies with the scripted token ids of each turn, whatever the prompt."""

    def __init__(self, tokenizer, replies: list[list[int]], generation_prompt: str):
        self.tokenizer, self.replies, self.generation_prompt = tokenizer, replies, generation_prompt

    def generate(self, prompts, params, seeds=None):
        completions = []
        for ids in prompts:
            reply = self.replies[self.tokenizer.decode(ids).count(self.generation_prompt) - 1]
            text = self.tokenizer.decode(reply, skip_special_tokens=True)
            completions.append(Completion(reply, [0.0] * len(reply), "eos", text))
        return completions


def test_the_runner_renders_the_envs_tools_natively():
    family = FAMILIES["chatml"]
    tok = family.tokenizer
    replies = [family.reply(TAGGED_CALL), family.reply(ANSWER)]
    engine = ScriptedReplies(tok, replies, "<|im_start|>assistant\n")
    runner = EpisodeRunner(engine, tok, calculator_env, SamplingParams(64), max_turns=3)
    [t] = runner.collect([TOOL_PROBLEM], 1, seed=(0,))
    assert t.correct and t.info["ended_by"] == "done" and t.info["tool_calls"] == 1
    c = play_env(family, calculator_env(), replies)[0].conversation
    assert t.token_ids == c.token_ids and t.loss_mask == c.loss_mask
    assert "<tools>" in tok.decode(t.token_ids)


def test_warm_start_demonstrations_render_the_tasks_tools_natively():
    family = FAMILIES["chatml"]
    tok = family.tokenizer
    task = SearchQATask(SearchQAParams(), seed=0, eval_size=40)
    ids, mask = sft_example(tok, task, 0, flawed=False)
    problem, env = task.train_problem(0), task.make_env(None, None)
    demo = task.demonstration(problem)
    rendered = tok.apply_chat_template(
        [*env.reset(problem), *demo], tools=env.tool_schemas, tokenize=False
    )
    assert family.ids(rendered) == ids + family.ids(family.after_eos)
    replies = [family.reply(m["content"]) for m in demo if m["role"] == "assistant"]
    assert sum(mask) == sum(len(r) for r in replies)
    text = tok.decode(ids)
    assert text.count(f"<tools>\n{json.dumps(env.tool_schemas[0])}\n</tools>") == 1
    assert "Call a tool by replying" not in text


# ---------------------------------------------------------------- budgets through the runner

OBSERVATION = "x" * 30  # longer than a turn's max_new_tokens


class ToolEnv:
    """Never done; answers every reply with a long observation; the 'boom' problem's tool fails."""

    def reset(self, problem):
        self.problem = problem
        return problem.messages()

    def step(self, action_text):
        if self.problem.id == "boom":
            raise RuntimeError("tool server down")
        return StepResult(OBSERVATION, 1.0, False)


def spans(t: Trajectory) -> list[list[int]]:
    """The policy's tokens of each turn."""
    out, start = [], None
    for i, m in enumerate([*t.loss_mask, 0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            out.append(t.token_ids[start:i])
            start = None
    return out


def runner(model, tok, max_new_tokens, max_turns, max_total_tokens=0):
    return EpisodeRunner(
        HFEngine(model, tok), tok, ToolEnv, SamplingParams(max_new_tokens, 1.0),
        max_turns=max_turns, max_total_tokens=max_total_tokens,
    )  # fmt: skip


def test_observations_do_not_count_against_max_new_tokens_and_max_turns_ends(tiny_model, tokenizer):
    out = runner(tiny_model, tokenizer, 6, 3).collect([Problem("a", "go")], 4, seed=(0, 0, 0))
    full_turns = 0
    for t in out:
        assert t.info["ended_by"] == "max_turns" and len(t.turn_ends) == 3
        for k, span in enumerate(spans(t)):
            assert span[-1] == tokenizer.eos_token_id or len(span) == 6
            full_turns += k > 0 and len(span) == 6
        assert t.turn_rewards == [1.0, 1.0, 1.0]
    assert full_turns > 0  # turns after a 30-character observation still get all 6 tokens


def test_max_total_tokens_cuts_the_last_reply(tiny_model, tokenizer):
    prompt = len(encode_prompt(tokenizer, [user("go")]))
    observation = len(FAMILIES["tiny"].ids(f"<|end|><|user|>{OBSERVATION}<|end|><|assistant|>"))
    cap = prompt + 8 + observation + 5  # room for a full first turn, 5 tokens of the second
    out = runner(tiny_model, tokenizer, 8, 5, cap).collect([Problem("a", "go")], 4, seed=(0, 0, 1))
    cut = 0
    for t in out:
        assert t.info["ended_by"] == "max_tokens"
        assert len(t.token_ids) <= cap
        last = spans(t)[-1]
        if len(last) < 8 and last[-1] != tokenizer.eos_token_id:  # cut by the budget
            assert len(t.token_ids) == cap and t.finish_reason == "length"
            cut += 1
    assert cut > 0
    assert any(len(t.turn_ends) == 2 for t in out)  # the observation counted, then the cut


def test_an_env_that_raises_ends_only_its_own_episodes(tiny_model, tokenizer):
    problems = [Problem("a", "go"), Problem("boom", "go"), Problem("b", "go")]
    out = runner(tiny_model, tokenizer, 4, 3).collect(problems, 2, seed=(0, 0, 2))
    for t in out:
        if t.problem.id == "boom":
            assert t.status == "crash" and t.info["ended_by"] == "env_error"
            assert "RuntimeError: tool server down" in t.info["error"]
            assert len(t.turn_ends) == 1 and t.turn_rewards == [0.0]
        else:
            assert t.status == "ok" and t.info["ended_by"] == "max_turns"
            assert len(t.turn_ends) == 3
