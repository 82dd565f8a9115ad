"""The default run as a new user meets it: `rlvr train` with no arguments on several seeds, each
from an empty $RLVR_HOME (so the warm start is built and timed too), one after another.

Prints one JSON object: the CPU (model name and whether it has AVX-512), the date and versions,
per seed the base and final greedy accuracy, pass@1 and pass@4 and the wall time of the whole
command, and over seeds the minimum, mean and maximum of each. Run it alone: two torch processes
on a 2-core machine slow each other many times over.

    python benchmarks/default_run.py [--seeds 0 1 2 3 4] [section.key=value ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))
from vs_trl import cpu_model  # noqa: E402

RLVR = Path(sys.executable).with_name("rlvr")
MEASURES = ("base_greedy", "base_pass@1", "final_greedy", "final_pass@1", "final_pass@4", "wall_s")


def cpu_flags() -> set[str]:
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def one_seed(seed: int, overrides: list[str], scratch: Path) -> dict:
    """`rlvr train` on `seed` from an empty cache; its summary's evals and the wall time."""
    home, runs = scratch / f"home-{seed}", scratch / f"runs-{seed}"
    args = [str(RLVR), "train", f"train.seed={seed}", f"log.run_dir={runs}", *overrides]
    start = time.perf_counter()
    subprocess.run(args, env={**os.environ, "RLVR_HOME": str(home)}, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    wall = time.perf_counter() - start
    summary = json.loads(next(runs.glob("*/summary.json")).read_text())
    base, final = summary["base_eval"], summary["final_eval"]
    shutil.rmtree(home)
    return {
        "seed": seed,
        "base_greedy": base["eval/accuracy"],
        "base_pass@1": base["eval/pass@1"],
        "final_greedy": final["eval/accuracy"],
        "final_pass@1": final["eval/pass@1"],
        "final_pass@4": final["eval/pass@4"],
        "wall_s": round(wall, 1),
    }


def spread(rows: list[dict]) -> dict:
    return {
        key: {"min": min(values), "mean": round(statistics.fmean(values), 4), "max": max(values)}
        for key in MEASURES
        for values in [[row[key] for row in rows]]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("overrides", nargs="*", help="section.key=value, as rlvr train takes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows = [one_seed(seed, args.overrides, Path(scratch)) for seed in args.seeds]
    flags = cpu_flags()
    print(json.dumps({
        "benchmark": "default_run",
        "cpu": cpu_model(), "avx512": "avx512f" in flags, "amx": "amx_tile" in flags,
        "cpus": os.cpu_count(), "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "overrides": args.overrides, "seeds": rows, "spread": spread(rows),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
