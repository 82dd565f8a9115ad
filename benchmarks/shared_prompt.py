"""What sharing each group's prompt in the training passes saves (train.share_prompt).

Two measurements, each side by side in this one process, alternating on and off:

1. the default run: two Trainers of the default config, one with train.share_prompt=false,
   step in turn; medians of time/update, time/old_logprobs-free step time and time/step;
2. the update alone on one real default batch whose prompts are lengthened by a common
   preamble of P tokens (a system prompt, few-shot examples): the median seconds of one
   policy_update with sharing on and off, for each P.

Prints one JSON object with the ratios (on / off), the CPU model, date and versions.

    python benchmarks/shared_prompt.py [--steps 8] [--repeats 5] [--preamble 0 64 256]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import platform
import statistics
import tempfile
import time

import torch
import transformers

from rlvr.config import load_config
from rlvr.train.trainer import Trainer
from rlvr.train.update import UpdateInputs, make_optimizer, make_scheduler, policy_update
from rlvr.types import Batch


def cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def default_steps(steps: int, run_dir: str) -> tuple[dict, Trainer]:
    trainers = {}
    for share in (True, False):
        cfg = load_config(None, [f"train.share_prompt={str(share).lower()}",
                                 f"log.run_dir={run_dir}/{share}", "log.quiet=true"])  # fmt: skip
        trainers[share] = Trainer(cfg)
    times = {share: {"update": [], "step": []} for share in trainers}
    for i in range(steps + 1):
        for share, trainer in trainers.items():
            start = time.perf_counter()
            metrics = trainer.step()
            trainer.state["step"] += 1
            if i:  # the first step warms up allocators and caches
                times[share]["step"].append(time.perf_counter() - start)
                times[share]["update"].append(metrics["time/update"])
    median = {s: {k: statistics.median(v) for k, v in t.items()} for s, t in times.items()}
    result = {
        "share_prompt": {k: round(v, 4) for k, v in median[True].items()},
        "no_share": {k: round(v, 4) for k, v in median[False].items()},
        "ratio": {k: round(median[True][k] / median[False][k], 3) for k in median[True]},
    }
    return result, trainers[False]


def one_batch(trainer: Trainer, preamble: int) -> Batch:
    """A default batch sampled by `trainer`, each prompt lengthened by `preamble` common
    tokens in front (the policy tokens and their logprobs unchanged)."""
    trajectories, _, _ = trainer.rollout({})
    extra = torch.randint(7, len(trainer.tokenizer), (preamble,), generator=torch.Generator())
    for t in trajectories:
        t.token_ids = extra.tolist() + t.token_ids
        t.loss_mask = [0] * preamble + t.loss_mask
        t.behaviour_logprobs = [0.0] * preamble + t.behaviour_logprobs
        t.turn_ends = [end + preamble for end in t.turn_ends]
    return Batch.from_trajectories(trajectories, trainer.tokenizer.pad_token_id)


def update_seconds(trainer: Trainer, batch: Batch, repeats: int) -> dict:
    advantages = torch.randn(batch.loss_mask.shape, generator=torch.Generator().manual_seed(0))
    data = UpdateInputs(batch, advantages, None, None)
    times = {True: [], False: []}
    for i in range(repeats + 1):
        for share in (True, False):
            cfg = trainer.cfg.model_copy(deep=True)
            cfg.train.share_prompt = share
            model = copy.deepcopy(trainer.model)
            optimizer = make_optimizer(cfg, model)
            scheduler = make_scheduler(cfg, optimizer)
            start = time.perf_counter()
            policy_update(model, optimizer, scheduler, data, cfg, trainer.components.loss, None,
                          torch.Generator().manual_seed(0))  # fmt: skip
            if i:
                times[share].append(time.perf_counter() - start)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    lengths = batch.attention_mask.sum(-1).float()
    return {
        "mean_sequence_tokens": round(float(lengths.mean()), 1),
        "update_seconds_share": round(on, 4),
        "update_seconds_no_share": round(off, 4),
        "ratio": round(on / off, 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="measured default steps per side")
    parser.add_argument("--repeats", type=int, default=5, help="timed updates per side and P")
    parser.add_argument("--preamble", type=int, nargs="+", default=[0, 64, 256])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as run_dir:
        default, trainer = default_steps(args.steps, run_dir)
        preambles = {
            str(p): update_seconds(trainer, one_batch(trainer, p), args.repeats)
            for p in args.preamble
        }
    result = {
        "benchmark": "shared_prompt",
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "default_run": default,
        "update_by_preamble_tokens": preambles,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
