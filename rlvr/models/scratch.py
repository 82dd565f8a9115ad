"""A real-architecture model built offline: a byte-level BPE tokenizer with Qwen2's special tokens
and ChatML template, trained on rlvr's own task text, and a seeded, randomly initialised Qwen2."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
# Qwen2.5 ships the Hermes tool-call tags as added tokens that are not special: they survive
# `skip_special_tokens`, so a decoded reply still shows its tool call.
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]

# Qwen2's pre-tokenizer: \p{N} alone splits every digit into its own token.
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
# Qwen2.5-Instruct's template verbatim: a default system message, tools rendered in the system
# turn, Hermes <tool_call> replies and <tool_response> turns.
CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

VOCAB_SIZE = 4096  # trained tokens + special and tool tokens; trains in about a second
CONTEXT = 4096  # positions every preset is built with
QWEN2_VOCAB = 151936  # Qwen2's embedding rows: its 151,665 tokens padded for fast matmuls

# Prose in the register of the tasks' instructions and a chat model's replies, so that common
# English words are whole tokens rather than strings of bytes.
ENGLISH = """\
You are a helpful assistant. Answer the question, and think step by step before you answer.
The user asks a question; the assistant solves it and ends its reply with the final answer.
Please reason carefully, check your work, and put your final answer after four hash marks.
Let's think about this problem. First we add the ones, then the tens, then the hundreds.
The answer is correct. That is wrong, try again. Here is the result of the search tool.
What is the capital of France? Paris is the capital and the largest city of France.
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with one step.
Once upon a time there was a small town by a river, where people worked, traded and lived.
It was founded long ago, and its population grew as the years went by and the roads improved.
Write a short story, a poem or a function in Python that returns the sum of a list of numbers.
def add(a, b):
    return a + b
for i in range(10):
    print(i, i * i)
{"name": "search", "arguments": {"query": "river"}}
Hello, world! How are you today? I am fine, thank you. Yes, no, maybe; (a), [b], {c}.
"""


@dataclass(frozen=True)
class Preset:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    mlp: int
    vocab: int | None  # embedding rows; None: exactly the tokenizer's size


PRESETS: dict[str, Preset] = {
    # Unit and end-to-end tests: builds and saves in about two seconds, mostly the tokenizer.
    # Heads of size 32, the smallest vLLM's CPU attention runs.
    "qwen2-test": Preset(hidden=64, layers=2, heads=2, kv_heads=1, mlp=128, vocab=None),
    # LoRA memory benchmarks: Qwen2's vocab and head size, ~0.3 B parameters.
    "qwen2-300m": Preset(hidden=1024, layers=16, heads=16, kv_heads=2, mlp=2304, vocab=QWEN2_VOCAB),
    # Qwen2-0.5B's exact shape (494 M parameters with the padded vocab).
    "qwen2-0.5b": Preset(hidden=896, layers=24, heads=14, kv_heads=2, mlp=4864, vocab=QWEN2_VOCAB),
}


def _task_texts(problems_per_task: int) -> Iterator[str]:
    """Prompts and worked replies (tool calls, env feedback) of rlvr's self-contained tasks."""
    # Imported here: the tasks pull in envs and rewards, which only the corpus needs.
    from rlvr.tasks import TASKS

    settings = {
        "arithmetic": {"operations": ["add", "sub", "mul"]},
        "countdown": {},
        "guess_number": {},
        "nim": {},
        "search_qa": {},
    }
    for name, params in settings.items():
        cls = TASKS[name]
        task = cls(cls.Params(**params), seed=0, eval_size=8)
        problems = [task.train_problem(i) for i in range(problems_per_task)]
        for problem in problems + task.eval_problems():
            prompt = problem.prompt
            yield prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
            if problem.answer is not None:
                yield problem.answer
            for flawed in (False, True):
                reply = task.demonstration(problem, flawed=flawed)
                yield reply if isinstance(reply, str) else "\n".join(m["content"] for m in reply)


# Standard-library modules whose docstrings give the corpus ordinary English and code: present in
# every Python, so the tokenizer needs no data files (its merges vary a little between versions).
DOC_MODULES = [
    "builtins", "argparse", "bisect", "collections", "contextlib", "csv", "dataclasses",
    "datetime", "difflib", "fractions", "functools", "heapq", "inspect", "itertools", "json",
    "logging", "math", "os", "pathlib", "random", "re", "shutil", "statistics", "string",
    "textwrap", "unittest",
]  # fmt: skip


def _docstrings() -> Iterator[str]:
    import importlib
    import inspect

    for name in DOC_MODULES:
        module = importlib.import_module(name)
        yield inspect.getdoc(module) or ""
        for attr in sorted(dir(module)):
            obj = getattr(module, attr)
            # Not submodules: which of those a module has depends on what was imported before,
            # and the tokenizer must not.
            if not attr.startswith("_") and not inspect.ismodule(obj) and inspect.getdoc(obj):
                yield inspect.getdoc(obj)


def default_corpus(problems_per_task: int = 300) -> list[str]:
    """Text the default tokenizer is trained on: rlvr's task prompts and demonstrations, the chat
    template's fixed text, standard-library docstrings and some generic English."""
    chat_text = [
        DEFAULT_SYSTEM,
        "# Tools\n\nYou may call one or more functions to assist with the user query.",
        "You are provided with function signatures within <tools></tools> XML tags:",
        "For each function call, return a json object with function name and arguments",
        "system\nuser\nassistant\ntool\n<tool_response>\n</tool_response>\n",
    ]
    # Repeated so that the template's words become whole tokens, as they are in Qwen2's vocab.
    return [*chat_text * 20, ENGLISH, *_docstrings(), *_task_texts(problems_per_task)]


def train_bpe_tokenizer(
    corpus: Iterable[str], vocab_size: int = VOCAB_SIZE
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with Qwen2's pre-tokenizer, special tokens, ids layout and
    ChatML template, trained on `corpus` (`vocab_size` includes the special and tool tokens)."""
    core = Tokenizer(
        models.BPE(
            unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", byte_fallback=False
        )
    )
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    added = SPECIAL_TOKENS + TOOL_TOKENS
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(added),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        # The trainer overwrites the model's affixes; Qwen2's tokenizer.json has "" for both.
        continuing_subword_prefix="",
        end_of_word_suffix="",
    )
    core.train_from_iterator(corpus, trainer=trainer)
    # Added after training, so they take the last ids as in Qwen2 (pad/eos are not 0, 1 or 2).
    core.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, normalized=False, special=False) for t in TOOL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=None,  # Qwen2 prepends nothing
        eos_token=IM_END,  # ends an assistant turn, as in Qwen2-Instruct
        pad_token=ENDOFTEXT,
        unk_token=None,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=CONTEXT,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_config(preset: str, tokenizer: PreTrainedTokenizerFast) -> Qwen2Config:
    """The Qwen2Config of `preset`, with `tokenizer`'s special token ids."""
    if preset not in PRESETS:
        raise ValueError(
            f"unknown scratch-model preset {preset!r}; choose one of {', '.join(PRESETS)}"
        )
    p = PRESETS[preset]
    return Qwen2Config(
        vocab_size=p.vocab or len(tokenizer),
        hidden_size=p.hidden,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.kv_heads,
        intermediate_size=p.mlp,
        max_position_embeddings=CONTEXT,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        use_sliding_window=False,
        # Qwen2 names <|endoftext|> as bos in its config although its tokenizer adds none.
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def parameter_count(config: Qwen2Config) -> int:
    """Parameters of a Qwen2ForCausalLM with `config`, by formula (no model is built)."""
    h, v, mlp = config.hidden_size, config.vocab_size, config.intermediate_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    attention = (h * h + h) + 2 * (h * kv + kv) + h * h  # q, k, v carry biases; o does not
    layer = attention + 3 * h * mlp + 2 * h  # gate, up, down; two RMSNorms
    embeddings = v * h * (1 if config.tie_word_embeddings else 2)
    return embeddings + config.num_hidden_layers * layer + h  # final norm


def generation_config(tokenizer: PreTrainedTokenizerFast) -> GenerationConfig:
    """The generation defaults Qwen2.5-0.5B-Instruct ships; note they sample with a repetition
    penalty, which any engine that honours the file applies unless told otherwise."""
    return GenerationConfig(
        bos_token_id=tokenizer.pad_token_id,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.pad_token_id],
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
        repetition_penalty=1.1,
    )


def build_scratch_model(
    out_dir: str | Path, preset: str = "qwen2-test", seed: int = 0, dtype: str = "float32"
) -> Path:
    """Train the tokenizer on the default corpus, initialise a `preset` Qwen2 from `seed`, and save
    both into `out_dir` as a Hugging Face model directory (safetensors); returns `out_dir`."""
    import torch
    from transformers import Qwen2ForCausalLM

    from rlvr.models.loading import DTYPES

    tokenizer = train_bpe_tokenizer(default_corpus())
    config = build_config(preset, tokenizer)
    torch.manual_seed(seed)
    # Initialised in float32 whatever the dtype, so one seed gives the same weights, rounded.
    model = Qwen2ForCausalLM(config).to(DTYPES[dtype])
    model.generation_config = generation_config(tokenizer)
    out = Path(out_dir)
    model.save_pretrained(out)
    # Older readers (transformers 4.x, as some vLLM builds pin) know only these names.
    config_file = out / "config.json"
    saved = json.loads(config_file.read_text())
    saved.update(torch_dtype=dtype, rope_theta=config.rope_parameters["rope_theta"])
    config_file.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    save_tokenizer(tokenizer, out)
    return out


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: str | Path) -> None:
    """Save `tokenizer` with a tokenizer_config.json laid out as Qwen2.5-Instruct's: class
    Qwen2Tokenizer, the chat template inline, `additional_special_tokens`. transformers 5 would
    write class TokenizersBackend, a list of `extra_special_tokens` and chat_template.jinja,
    which transformers 4.x cannot load."""
    out = Path(out_dir)
    tokenizer.save_pretrained(out, save_jinja_files=False)
    added = {
        str(i): {
            "content": t.content,
            "lstrip": t.lstrip,
            "normalized": t.normalized,
            "rstrip": t.rstrip,
            "single_word": t.single_word,
            "special": t.special,
        }
        for i, t in sorted(tokenizer.added_tokens_decoder.items())
    }
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "chat_template": tokenizer.chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": tokenizer.eos_token,
        "errors": "replace",
        "model_max_length": tokenizer.model_max_length,
        "pad_token": tokenizer.pad_token,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m rlvr.models.scratch",
        description="Build a randomly initialised Qwen2 model with a locally trained BPE tokenizer.",
    )
    parser.add_argument("out_dir", type=Path, help="directory to save the model into")
    parser.add_argument("--preset", default="qwen2-test", choices=list(PRESETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    out = build_scratch_model(args.out_dir, args.preset, args.seed, args.dtype)
    config = Qwen2Config.from_pretrained(out)
    print(json.dumps({"dir": str(out.resolve()), "parameters": parameter_count(config)}))


if __name__ == "__main__":
    main()
