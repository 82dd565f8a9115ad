"""Memory and time of one policy-update step with LoRA vs full fine-tuning, on a ~250 M Llama.

Builds a Llama-shaped model from a transformers config (random init: hidden 1024, 16 layers,
16 heads with 8 KV heads, MLP 2816, vocab 32000, untied embeddings, float32), and runs rlvr's own
`policy_update` (PPO clip, AdamW) on a batch of 4 x 256 tokens, once to warm up (AdamW allocates
its state on the first step) and then --steps measured times. Each mode runs in its own
subprocess, so peak RSS (`ru_maxrss`) is that mode's alone; the RSS after building the model is
reported too, and the peak minus it is what the update itself costs. Also the trainable
parameter count and the bytes of a checkpoint of what trains (`trainable_state_dict` saved with
safetensors). Prints one JSON object with both modes and the LoRA / full ratios.

    python benchmarks/lora_memory.py [--steps 2] [--rank 16]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPE = {
    "hidden_size": 1024,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "intermediate_size": 2816,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
SEQUENCES, TOKENS, PROMPT = 4, 256, 64  # the batch: 4 x 256 tokens, the last 192 generated


def rss_mib() -> float:
    """Resident memory now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def make_batch(vocab: int, generator):
    import torch

    from rlvr.types import Batch, Problem, Trajectory

    trajectories = [
        Trajectory(
            Problem(str(i), "x"),
            i,
            0,
            token_ids=torch.randint(3, vocab, (TOKENS,), generator=generator).tolist(),
            loss_mask=[0] * PROMPT + [1] * (TOKENS - PROMPT),
            behaviour_logprobs=[0.0] * TOKENS,
            turn_rewards=[float(i % 2)],
            turn_ends=[TOKENS],
        )
        for i in range(SEQUENCES)
    ]
    return Batch.from_trajectories(trajectories, 0)


def run_mode(mode: str, steps: int, rank: int) -> dict:
    """One mode, measured in this process."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM, get_constant_schedule

    from rlvr.algos.losses import LOSSES
    from rlvr.config import LoraSettings, load_config
    from rlvr.models.lora import apply_lora, trainable_state_dict
    from rlvr.train.update import UpdateInputs, policy_update

    cfg = load_config(
        None,
        [f"rollout.batch_size={SEQUENCES}", f"rollout.group_size={SEQUENCES}"]
        + [f"train.micro_batch_size={SEQUENCES}", "train.lr=1e-5"],
    )
    rss_start = rss_mib()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SHAPE))
    params = sum(p.numel() for p in model.parameters())
    if mode == "lora":
        model = apply_lora(model, LoraSettings(r=rank, target_modules="all-linear"))
    trainable = trainable_state_dict(model)
    optimizer = torch.optim.AdamW(trainable.values(), lr=cfg.train.lr)
    scheduler = get_constant_schedule(optimizer)
    generator = torch.Generator().manual_seed(0)
    batch = make_batch(SHAPE["vocab_size"], generator)
    advantages = torch.randn(batch.loss_mask.shape, generator=generator) * batch.loss_mask
    data = UpdateInputs(batch, advantages, None, None)
    rss_built = rss_mib()

    seconds = []
    for _ in range(1 + steps):  # the first step also allocates AdamW's state
        start = time.perf_counter()
        result = policy_update(
            model, optimizer, scheduler, data, cfg, LOSSES["ppo_clip"], None, generator
        )
        seconds.append(time.perf_counter() - start)
        assert result.skipped == 0, "non-finite update"
    peak = peak_rss_mib()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trainable.safetensors"
        save_file({k: v.detach().contiguous() for k, v in trainable.items()}, path)
        checkpoint_bytes = path.stat().st_size
    return {
        "mode": mode,
        "lora": {"r": rank, "alpha": 16.0, "target_modules": "all-linear"}
        if mode == "lora"
        else None,
        "model_params": params,
        "trainable_params": sum(p.numel() for p in trainable.values()),
        "checkpoint_bytes": checkpoint_bytes,
        "rss_mib_at_start": round(rss_start, 1),
        "rss_mib_after_build": round(rss_built, 1),
        "peak_rss_mib": round(peak, 1),
        "peak_minus_build_mib": round(peak - rss_built, 1),
        "first_step_seconds": round(seconds[0], 2),
        "step_seconds": round(sum(seconds[1:]) / steps, 2),
        "step_seconds_each": [round(s, 2) for s in seconds[1:]],
    }


def versions() -> dict:
    import peft
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="measured steps after one warmup")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank")
    parser.add_argument("--mode", choices=["full", "lora"], help=argparse.SUPPRESS)  # child
    args = parser.parse_args(argv)
    if args.mode:
        return run_mode(args.mode, args.steps, args.rank)

    modes = {}
    for mode in ("full", "lora"):
        command = [sys.executable, __file__, "--mode", mode, "--steps", str(args.steps)]
        child = subprocess.run(
            command + ["--rank", str(args.rank)], capture_output=True, text=True, check=False
        )
        if child.returncode:
            sys.exit(f"{mode} run failed:\n{child.stderr[-4000:]}")
        modes[mode] = json.loads(child.stdout.strip().splitlines()[-1])
    full, lora = modes["full"], modes["lora"]
    keys = ("peak_rss_mib", "peak_minus_build_mib", "step_seconds", "first_step_seconds")
    keys += ("trainable_params", "checkpoint_bytes")
    return {
        "benchmark": "lora_memory",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "versions": versions(),
        "model": dict(SHAPE, architecture="LlamaForCausalLM", dtype="float32"),
        "batch": {"sequences": SEQUENCES, "tokens": TOKENS, "generated_tokens": TOKENS - PROMPT},
        "update": "rlvr.train.update.policy_update, ppo_clip, token-mean, AdamW, 1 micro-batch",
        "full": full,
        "lora": lora,
        "lora_over_full": {k: round(lora[k] / full[k], 4) for k in keys},
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=None if "--mode" in sys.argv else 2))
