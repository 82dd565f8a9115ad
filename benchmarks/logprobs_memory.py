"""Peak memory and time of chosen-token logprobs and entropy, forward and backward, at a
real model's vocabulary: rlvr's chunked ChosenLogprobs against the plain full-vocabulary
log-softmax (what a trainer without chunking computes), each in a fresh process.

Logits are bf16, as a bf16 model returns them (Qwen2.5's 151,936-token vocabulary by default).
Prints one JSON object: peak resident memory above the logits (their bf16 gradient included), seconds,
the ratios, and the largest difference of the logprobs and gradients between the two.

    python benchmarks/logprobs_memory.py [--rows 2] [--positions 512] [--vocab 151936]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import resource
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def rss_bytes() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def plain(logits: torch.Tensor, targets: torch.Tensor):
    logp = F.log_softmax(logits.float(), -1)
    return logp.gather(-1, targets[..., None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


def chunked(logits: torch.Tensor, targets: torch.Tensor):
    from rlvr.models.logprobs import ChosenLogprobs

    return ChosenLogprobs.apply(logits, targets, 1.0, True)


def measure(variant: str, rows: int, positions: int, vocab: int) -> dict:
    """One variant in this process: forward and backward of a loss on both outputs."""
    torch.manual_seed(0)
    logits = (torch.randn(rows, positions, vocab) * 3).bfloat16().requires_grad_()
    targets = torch.randint(0, vocab, (rows, positions))
    weights = torch.randn(2, rows, positions)
    before = rss_bytes() + logits.numel() * logits.element_size()
    start = time.perf_counter()
    chosen, entropy = {"plain": plain, "chunked": chunked}[variant](logits, targets)
    (weights[0] * chosen + weights[1] * entropy).sum().backward()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "peak_above_logits_bytes": peak - before,
        "seconds": seconds,
        "chosen_head": chosen.detach()[0, :64].tolist(),
        "grad_head": logits.grad[0, 0, :64].float().tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--positions", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(measure(args.variant, args.rows, args.positions, args.vocab)))
        return
    results = {}
    for variant in ("plain", "chunked"):
        command = [sys.executable, __file__, "--variant", variant, "--rows", str(args.rows),
                   "--positions", str(args.positions), "--vocab", str(args.vocab)]  # fmt: skip
        results[variant] = json.loads(subprocess.check_output(command))
    p, c = results["plain"], results["chunked"]
    block = args.rows * args.positions * args.vocab * 4
    print(json.dumps({
        "shape": {"rows": args.rows, "positions": args.positions, "vocab": args.vocab},
        "float32_block_bytes": block,
        "plain": {k: p[k] for k in ("peak_above_logits_bytes", "seconds")},
        "chunked": {k: c[k] for k in ("peak_above_logits_bytes", "seconds")},
        "memory_ratio_chunked_over_plain":
            c["peak_above_logits_bytes"] / p["peak_above_logits_bytes"],
        "time_ratio_chunked_over_plain": c["seconds"] / p["seconds"],
        "max_logprob_difference": max(abs(a - b) for a, b in zip(p["chosen_head"], c["chosen_head"])),
        "max_grad_difference": max(abs(a - b) for a, b in zip(p["grad_head"], c["grad_head"])),
        "cpu": cpu_model(),
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
