"""rlvr's embedded engine against transformers' `generate` on the same model, prompts and budget.

Both sample the default batch (16 prompts x 8 samples, temperature 1) from the warm-started
tiny model of the default task, in turn, R rounds. `generate` is what TRL's trainer calls
without vLLM: it prefills every row's copy of the prompt and decodes every row until the
longest one ends. rlvr's engine prefills each distinct prompt once and drops finished rows.
Prints one JSON object: median seconds per batch for each, the ratio, and mean tokens sampled.

    python benchmarks/engine_decode.py [--rounds 8] [section.key=value ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time

import torch
import transformers

from rlvr.config import load_config
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.tokens import encode_prompt
from rlvr.train.display import Display
from rlvr.train.setup import build_components
from rlvr.train.trainer import load_policy


def cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def hf_generate(model, tokenizer, prompts: list[list[int]], max_new_tokens: int) -> list[int]:
    """transformers' sampling loop on the left-padded batch; the length of each reply."""
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    attention = torch.arange(width) >= torch.tensor([width - len(p) for p in prompts])[:, None]
    out = model.generate(
        input_ids=ids, attention_mask=attention.long(), do_sample=True, temperature=1.0,
        top_k=0, top_p=1.0, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    replies = out[:, width:]
    ended = replies == tokenizer.eos_token_id
    return [int(r.int().argmax()) + 1 if r.any() else replies.shape[1] for r in ended]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    cfg = load_config(None, [*args.overrides, "log.quiet=true"])
    components = build_components(cfg)
    model, tokenizer = load_policy(cfg, components, Display(True))
    model.eval()
    r = cfg.rollout
    problems = components.task.eval_problems()[: r.batch_size // r.group_size]
    prompts = [
        encode_prompt(tokenizer, p.messages()) for p in problems for _ in range(r.group_size)
    ]
    engine, params = HFEngine(model, tokenizer), SamplingParams(r.max_new_tokens, 1.0)
    seconds: dict[str, list[float]] = {"rlvr": [], "transformers_generate": []}
    lengths: dict[str, list[float]] = {"rlvr": [], "transformers_generate": []}
    with torch.no_grad():
        for round_ in range(args.rounds + 1):  # round 0 warms both up and is not counted
            start = time.perf_counter()
            seeds = [round_ * len(prompts) + i for i in range(len(prompts))]
            replies = [len(c.token_ids) for c in engine.generate(prompts, params, seeds)]
            rlvr_time = time.perf_counter() - start
            start = time.perf_counter()
            theirs = hf_generate(model, tokenizer, prompts, r.max_new_tokens)
            hf_time = time.perf_counter() - start
            if round_:
                seconds["rlvr"].append(rlvr_time)
                seconds["transformers_generate"].append(hf_time)
                lengths["rlvr"].append(statistics.fmean(replies))
                lengths["transformers_generate"].append(statistics.fmean(theirs))
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(json.dumps({
        "benchmark": "engine_decode", "cpu": cpu_model(), "threads": torch.get_num_threads(),
        "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "transformers": transformers.__version__, "batch": len(prompts),
        "max_new_tokens": r.max_new_tokens, "rounds": args.rounds,
        "seconds_per_batch_median": {k: round(v, 4) for k, v in median.items()},
        "mean_reply_tokens": {k: round(statistics.fmean(v), 1) for k, v in lengths.items()},
        "rlvr_vs_generate": round(median["rlvr"] / median["transformers_generate"], 3),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
