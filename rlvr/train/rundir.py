"""A run's directory: resolved config, metrics.jsonl, summary.json, checkpoints/, final/, report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from rlvr.config import Config, ConfigError, build_config, dump_config


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self.config_file = path / "config.yaml"
        self.metrics_file = path / "metrics.jsonl"
        self.summary_file = path / "summary.json"
        self.checkpoints = path / "checkpoints"
        self.final = path / "final"

    @classmethod
    def for_config(cls, cfg: Config) -> RunDir:
        """The new run's directory, checked but not yet written (a failed start leaves nothing)."""
        name = cfg.log.name or f"{cfg.task.name.replace(':', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
        run = cls(Path(cfg.log.run_dir) / name)
        if run.checkpoints.is_dir() and any(run.checkpoints.iterdir()):
            raise ConfigError(
                f"run directory {run.path} already holds checkpoints; fix: `rlvr train --resume {run.path}` "
                "to continue it, or set log.name to a new name"
            )
        return run

    def start(self, cfg: Config) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(dump_config(cfg))
        self.metrics_file.write_text("")

    def load_config(self) -> Config:
        if not self.config_file.is_file():
            raise ConfigError(
                f"{self.path} is not a run directory (no config.yaml); fix: pass runs/<name>"
            )
        return build_config(yaml.safe_load(self.config_file.read_text()))

    def log(self, record: dict) -> None:
        with open(self.metrics_file, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def truncate_metrics(self, after_step: int) -> None:
        """Drop records of steps that a resume will run again."""
        if not self.metrics_file.is_file():
            return
        kept = [
            line
            for line in self.metrics_file.read_text().splitlines()
            if line and json.loads(line)["step"] <= after_step
        ]
        self.metrics_file.write_text("".join(line + "\n" for line in kept))

    def read_metrics(self) -> list[dict]:
        return [json.loads(line) for line in self.metrics_file.read_text().splitlines() if line]

    def write_summary(self, summary: dict) -> None:
        self.summary_file.write_text(json.dumps(summary, indent=2))
