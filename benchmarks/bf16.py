"""bf16 autocast against float32 for the update's forward and backward, on this CPU.

For each tiny-model preset: the seconds of one forward + backward of the chosen-token logprobs
over a batch of sequences, in float32 and under torch.autocast(bfloat16), the ratio, and the
bf16 logprobs' error against float32 (max and mean absolute, in nats). Prints one JSON object;
the CPU's bf16 support (avx512_bf16, amx_bf16) is in it, since without it bf16 is emulated.

    python benchmarks/bf16.py [--batch 64] [--length 64] [--repeats 5] [preset ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time

import torch

from rlvr.models.logprobs import token_logprobs
from rlvr.models.tiny import PRESETS, build_model, build_tokenizer


def cpu_info() -> dict:
    model, flags = "", set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
    return {"cpu": model, "bf16_flags": sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile"})}


def timed_pass(model, input_ids, attention, autocast: bool) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logprobs, _ = token_logprobs(model, input_ids, attention)
    logprobs.sum().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start, logprobs.detach().float()


def measure(preset: str, batch: int, length: int, repeats: int) -> dict:
    tokenizer = build_tokenizer()
    model = build_model(preset, tokenizer, seed=0)
    input_ids = torch.randint(5, len(tokenizer), (batch, length))
    attention = torch.ones_like(input_ids)
    seconds: dict[str, list[float]] = {"float32": [], "bf16": []}
    outputs = {}
    for _ in range(repeats + 1):  # the first of each is a warm-up
        for name in seconds:
            elapsed, outputs[name] = timed_pass(model, input_ids, attention, name == "bf16")
            seconds[name].append(elapsed)
    error = (outputs["bf16"] - outputs["float32"]).abs()
    f32, bf16 = (statistics.median(seconds[n][1:]) for n in ("float32", "bf16"))
    return {
        "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "float32_s": round(f32, 4),
        "bf16_s": round(bf16, 4),
        "bf16_over_float32": round(bf16 / f32, 3),
        "logprob_abs_error_max": round(float(error.max()), 4),
        "logprob_abs_error_mean": round(float(error.mean()), 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", default=["nano", "small", "medium"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    unknown = set(args.presets) - set(PRESETS)
    if unknown:
        parser.error(f"unknown presets {sorted(unknown)}; choose from {', '.join(PRESETS)}")
    print(json.dumps({
        "benchmark": "bf16", **cpu_info(), "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "batch": args.batch, "length": args.length,
        "presets": {p: measure(p, args.batch, args.length, args.repeats) for p in args.presets},
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
