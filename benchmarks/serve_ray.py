"""`rlvr serve` on Ray against `rlvr serve` in one process, through the tinker SDK: a training
step (forward_backward + optim_step) split over trainer ranks, and a burst of concurrent sample
calls spread over rollout workers.

Both services run in this process (uvicorn threads) on the embedded tiny model; the Ray one has
--ranks trainer ranks (rank 0 here) and --workers rollout workers, one torch thread each, and
the in-process one --threads threads. Calls alternate between the two after --warmup of each.
Prints one JSON object: median milliseconds of each and their ratios, with the CPU, date and
versions.

    python benchmarks/serve_ray.py [--ranks 2] [--workers 2] [--threads 2] [--datums 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "methods"))

import numpy as np  # noqa: E402
import ray  # noqa: E402
import tinker  # noqa: E402
import torch  # noqa: E402
from machine import machine  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.serve import build_service, in_thread  # noqa: E402

KEY = "tml-bench"
types = tinker.types


def workload(args, url: str):
    """(train step, sample burst) as calls on a fresh client of the service at `url`."""
    client = tinker.ServiceClient(base_url=url, api_key=KEY)
    training = client.create_lora_training_client(base_model="tiny", rank=8).result()
    rng = np.random.default_rng(0)
    rows = [rng.integers(7, 100, args.tokens + 1).tolist() for _ in range(args.datums)]
    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints(r[:-1]),
            loss_fn_inputs={"target_tokens": r[1:], "weights": [1.0] * args.tokens},
        )
        for r in rows
    ]
    sampling = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(rows[0][:16])
    params = types.SamplingParams(max_tokens=args.sample_tokens, temperature=1.0)

    def step() -> None:
        training.forward_backward(data, "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=1e-4)).result()

    def burst() -> None:
        started = [sampling.sample(prompt, 4, params) for _ in range(args.samples)]
        for future in started:
            future.result()

    return client, step, burst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="the in-process service's")
    parser.add_argument("--datums", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--samples", type=int, default=8, help="concurrent sample calls of 4")
    parser.add_argument("--sample-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ray.init(num_cpus=max(4, args.ranks + args.workers), include_dashboard=False,
             log_to_driver=False)  # fmt: skip
    overrides = ["distributed.backend=ray", f"distributed.trainer_ranks={args.ranks}",
                 f"distributed.rollout_workers={args.workers}", "distributed.worker_cpus=0.5"]  # fmt: skip
    distributed = load_config(None, overrides).distributed
    times: dict[str, list[float]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        in_thread(build_service("tiny", Path(tmp) / "local"), KEY) as local_url,
        in_thread(build_service("tiny", Path(tmp) / "ray", distributed=distributed), KEY) as url,
    ):
        arms = {"in_process": workload(args, local_url), "ray": workload(args, url)}
        for i in range(args.warmup + args.repeats):
            for arm, (_, step, burst) in arms.items():
                for call, run in (("train_step", step), ("sample_burst", burst)):
                    start = time.perf_counter()
                    run()
                    if i >= args.warmup:
                        times.setdefault(f"{call}/{arm}", []).append(
                            1000 * (time.perf_counter() - start)
                        )
        for client, _, _ in arms.values():
            client.close("success").result(timeout=30)
    ray.shutdown()
    median = {name: round(statistics.median(t), 1) for name, t in times.items()}
    ratios = {
        f"{call}_ray_over_in_process": round(median[f"{call}/ray"] / median[f"{call}/in_process"], 3)
        for call in ("train_step", "sample_burst")
    }  # fmt: skip
    print(json.dumps({
        "benchmark": "serve_ray", "model": "tiny nano", "ranks": args.ranks,
        "workers": args.workers, "in_process_threads": args.threads, "datums": args.datums,
        "tokens": args.tokens, "samples": args.samples, "sample_tokens": args.sample_tokens,
        "repeats": args.repeats, "median_ms": median, **ratios,
        "tinker_sdk": tinker.__version__, "ray": ray.__version__, **machine(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
