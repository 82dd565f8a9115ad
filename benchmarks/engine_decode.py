"""rlvr's embedded engine against transformers' `generate` on the same model, prompts and budget.

Each samples one batch (the config's prompts x group, temperature 1; the default task unless
--config names a file) from its warm-started tiny model, in turn, R rounds. `generate` is what
TRL's trainer calls without vLLM: it prefills every row's copy of the prompt and decodes every
row until the longest one ends. rlvr's engine prefills each distinct prompt once, drops
finished rows and writes each token's keys into room reserved in its KV cache; a third arm runs
it on transformers' own cache, which concatenates (the same samples, checked). Prints one JSON
object: median seconds per batch for each, the ratios, and mean tokens sampled.

    python benchmarks/engine_decode.py [--rounds 8] [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from unittest.mock import patch

import torch
import transformers

from rlvr.config import load_config
from rlvr.rollout import HFEngine, SamplingParams, hf_engine
from rlvr.rollout.tokens import encode_prompt
from rlvr.train.components import build_components
from rlvr.train.display import Display
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
    parser.add_argument("--config", default=None)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    cfg = load_config(args.config, [*args.overrides, "log.quiet=true"])
    components = build_components(cfg)
    model, tokenizer = load_policy(cfg, components, Display(True))
    model.eval()
    r = cfg.rollout
    problems = components.task.eval_problems()[: r.batch_size // r.group_size]
    prompts = [
        encode_prompt(tokenizer, p.messages()) for p in problems for _ in range(r.group_size)
    ]
    engine, params = HFEngine(model, tokenizer), SamplingParams(r.max_new_tokens, 1.0)

    def rlvr_engine(seeds: list[int]) -> list[list[int]]:
        return [c.token_ids for c in engine.generate(prompts, params, seeds)]

    def rlvr_concatenating(seeds: list[int]) -> list[list[int]]:
        with patch.object(hf_engine, "make_room", lambda cache, room: None):
            return rlvr_engine(seeds)

    arms = {"rlvr": rlvr_engine, "rlvr_concatenating_cache": rlvr_concatenating}
    seconds: dict[str, list[float]] = {name: [] for name in [*arms, "transformers_generate"]}
    lengths: dict[str, list[float]] = {name: [] for name in seconds}
    with torch.no_grad():
        for round_ in range(args.rounds + 1):  # round 0 warms them up and is not counted
            seeds = [round_ * len(prompts) + i for i in range(len(prompts))]
            replies = {}
            for name, sample in arms.items():
                start = time.perf_counter()
                replies[name] = sample(seeds)
                if round_:
                    seconds[name].append(time.perf_counter() - start)
                    lengths[name].append(statistics.fmean(map(len, replies[name])))
            if replies["rlvr"] != replies["rlvr_concatenating_cache"]:
                raise SystemExit("the two caches gave different samples: the room is broken")
            start = time.perf_counter()
            theirs = hf_generate(model, tokenizer, prompts, r.max_new_tokens)
            if round_:
                seconds["transformers_generate"].append(time.perf_counter() - start)
                lengths["transformers_generate"].append(statistics.fmean(theirs))
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(json.dumps({
        "benchmark": "engine_decode", "cpu": cpu_model(), "threads": torch.get_num_threads(),
        "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "transformers": transformers.__version__, "config": args.config or "default",
        "batch": len(prompts),
        "max_new_tokens": r.max_new_tokens, "rounds": args.rounds,
        "seconds_per_batch_median": {k: round(v, 4) for k, v in median.items()},
        "mean_reply_tokens": {k: round(statistics.fmean(v), 1) for k, v in lengths.items()},
        "rlvr_vs_generate": round(median["rlvr"] / median["transformers_generate"], 3),
        "room_vs_concatenating": round(median["rlvr"] / median["rlvr_concatenating_cache"], 3),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
