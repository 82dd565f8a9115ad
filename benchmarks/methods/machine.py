"""What every methods benchmark reports beside its numbers: the CPU, threads, date, versions."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

import torch
import transformers


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict[str, object]:
    return {
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
