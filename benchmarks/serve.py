"""Overhead of `rlvr serve`: one forward_backward through the tinker SDK and the HTTP service
against the same call in process, on the same model, data and thread count.

The service runs in this process (uvicorn in a thread) on the embedded tiny model; a second,
identical host takes the in-process calls. The calls alternate, after --warmup of each, so drift
on the machine falls on both. Prints one JSON object: median milliseconds of each, their ratio
and difference, with the CPU, date and versions.

    python benchmarks/serve.py [--preset nano] [--datums 8] [--tokens 128] [--repeats 15]
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
import tinker  # noqa: E402
from machine import machine  # noqa: E402

from rlvr.serve import build_service, in_thread  # noqa: E402
from rlvr.serve.wire import Datum  # noqa: E402

KEY = "tml-bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datums", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = [rng.integers(7, 100, args.tokens + 1) for _ in range(args.datums)]
    sdk_data = [
        tinker.types.Datum(
            model_input=tinker.types.ModelInput.from_ints(r[:-1].tolist()),
            loss_fn_inputs={"target_tokens": r[1:].tolist(), "weights": [1.0] * args.tokens},
        )
        for r in rows
    ]
    local_data = [
        Datum(r[:-1], {"target_tokens": r[1:], "weights": np.ones(args.tokens, np.float32)})
        for r in rows
    ]
    with (
        tempfile.TemporaryDirectory() as tmp,
        in_thread(build_service("tiny", Path(tmp) / "served"), KEY) as url,
    ):
        client = tinker.ServiceClient(base_url=url, api_key=KEY)
        training = client.create_lora_training_client(base_model="tiny", rank=8).result()
        local = build_service("tiny", Path(tmp) / "local").host
        local.add("local", {"rank": 8, "seed": 0})

        def served() -> None:
            training.forward_backward(sdk_data, "cross_entropy").result()

        def in_process() -> None:
            local.forward_backward("local", local_data, "cross_entropy", {})

        times: dict[str, list[float]] = {"service": [], "in_process": []}
        for i in range(args.warmup + args.repeats):
            for name, call in (("service", served), ("in_process", in_process)):
                start = time.perf_counter()
                call()
                if i >= args.warmup:
                    times[name].append(1000 * (time.perf_counter() - start))
    median = {name: round(statistics.median(t), 2) for name, t in times.items()}
    print(json.dumps({
        "benchmark": "serve", "call": "forward_backward (cross_entropy)", "model": "tiny nano",
        "datums": args.datums, "tokens": args.tokens, "repeats": args.repeats,
        "median_ms": median,
        "ratio_service_over_in_process": round(median["service"] / median["in_process"], 3),
        "overhead_ms": round(median["service"] - median["in_process"], 2),
        "tinker_sdk": tinker.__version__, **machine(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
