"""A run's directory: resolved config, metrics.jsonl, reward_errors.jsonl, summary.json,
checkpoints/, final/, report; and the bookkeeping that lets a stopped run start again."""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
import transformers
import yaml

import rlvr
from rlvr.analysis.page import run_page
from rlvr.analysis.report import plot_run
from rlvr.config import Config, ConfigError, build_config, dump_config
from rlvr.train.checkpoint import checkpoint_step, complete_checkpoints, remove_incomplete


class RunDirError(RuntimeError):
    """A write to the run directory failed (full disk, read-only); the message says what survives."""


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self.config_file = path / "config.yaml"
        self.metrics_file = path / "metrics.jsonl"
        self.reward_errors = path / "reward_errors.jsonl"
        self.samples_file = path / "samples.jsonl"
        self.summary_file = path / "summary.json"
        self.checkpoints = path / "checkpoints"
        self.final = path / "final"

    @classmethod
    def for_config(cls, cfg: Config) -> RunDir:
        """The new run's directory, checked but not yet written (a failed start leaves nothing)."""
        name = cfg.log.name or f"{cfg.task.name.replace(':', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
        run = cls(Path(cfg.log.run_dir) / name)
        if complete_checkpoints(run.checkpoints):  # incomplete ones are a start that died saving
            raise ConfigError(
                f"run directory {run.path} already holds checkpoints; fix: `rlvr train --resume {run.path}` "
                "to continue it, or set log.name to a new name"
            )
        return run

    @classmethod
    def open(cls, cfg: Config, resume: Path | None) -> RunDir:
        """The directory of the run `resume` names, or a new run's; refused before any work
        when it cannot be written."""
        run = cls(resume) if resume else cls.for_config(cfg)
        run.check_writable(
            f"make {resume} writable, or copy it somewhere writable and resume the copy"
            if resume
            else "set log.run_dir to a writable directory, e.g. log.run_dir=/tmp/runs"
        )
        return run

    def check_writable(self, fix: str) -> None:
        """Fail before any work when the run cannot write its directory (read-only, no rights)."""
        target = self.path
        while not target.exists() and target != target.parent:
            target = target.parent  # the nearest folder that exists is where mkdir will write
        try:
            with tempfile.TemporaryFile(dir=target, prefix=".rlvr-write-check-"):
                pass
        except OSError as e:
            raise ConfigError(
                f"cannot write the run directory {self.path}: {target} is not writable "
                f"({e.strerror}); fix: {fix}"
            ) from e

    def start(self, cfg: Config, resumed: bool = False) -> str | None:
        """A fresh start; also of a run whose every checkpoint was cut short (a kill or a full
        disk during the first save), which leaves nothing to resume from: then a note says so."""
        removed = remove_incomplete(self.checkpoints)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(dump_config(cfg))
        self.metrics_file.write_text("")
        self.reward_errors.unlink(missing_ok=True)
        if not (resumed or removed):
            return None
        cut = f" (removed {len(removed)} cut short by a kill or full disk)" if removed else ""
        return f"[yellow]{self.path} has no complete checkpoint{cut}; starting the run from scratch"

    def finished(self, steps: int) -> bool:
        """Whether the run finished after `steps` steps: its summary, the last write, says so and
        no later checkpoint exists (a longer resume that was stopped)."""
        checkpoints = complete_checkpoints(self.checkpoints)
        return (
            self.summary_file.is_file()
            and self.read_summary().get("steps") == steps
            and bool(checkpoints)
            and checkpoint_step(checkpoints[-1]) == steps
        )

    def load_config(self) -> Config:
        if not self.config_file.is_file():
            raise ConfigError(
                f"{self.path} is not a run directory (no config.yaml); fix: pass runs/<name>"
            )
        return build_config(yaml.safe_load(self.config_file.read_text()))

    def log(self, record: dict) -> None:
        with open(self.metrics_file, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def log_samples(self, records: list[dict]) -> None:
        with open(self.samples_file, "a") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in records)

    def truncate_metrics(self, after_step: int) -> None:
        """Drop records of steps that a resume will run again."""
        for path in (self.metrics_file, self.reward_errors, self.samples_file):
            records = _read_jsonl(path)
            _replace_jsonl(path, [r for r in records if r["step"] <= after_step])

    def reopen_final_step(self, step: int, keep_eval: bool) -> None:
        """Turn the records of a finished run's last step into those of an ordinary step, for a
        resume that trains past it: the final-eval record goes, and its eval joins the step's
        record when `keep_eval` (the longer run evaluates at that step anyway)."""
        records = _read_jsonl(self.metrics_file)
        final = [r for r in records if r["step"] == step and _eval_only(r)]
        records = [r for r in records if not (r["step"] == step and _eval_only(r))]
        if keep_eval and final:
            for record in records:
                if record["step"] == step:
                    record.update(final[-1])
        _replace_jsonl(self.metrics_file, records)

    def read_metrics(self) -> list[dict]:
        return _read_jsonl(self.metrics_file)

    def write_summary(self, state: dict, config_hash: str, report: bool = True) -> dict:
        """summary.json, then the report unless `report` is false: the last writes of a
        finished run."""
        summary = {
            "base_eval": state["base_eval"],
            "final_eval": state["final_eval"],
            "steps": state["step"],
            "wall_seconds": round(state["elapsed"], 1),
            "config_hash": config_hash,
            "versions": {
                "rlvr": rlvr.__version__,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "python": platform.python_version(),
            },
            "machine": {"platform": platform.platform(), "cpus": torch.get_num_threads()},
        }
        self.summary_file.write_text(json.dumps(summary, indent=2))
        if report:  # the page shows summary.json, so it comes after
            plot_run(self.read_metrics(), self.path / "report.png", self.path.name)
            (self.path / "report.html").write_text(run_page(self.path))
        return summary

    def read_summary(self) -> dict:
        return json.loads(self.summary_file.read_text())

    def finished_note(self) -> str:
        steps = self.read_summary()["steps"]
        return (
            f"{self.path} already finished its {steps} steps; its final model is {self.final}. "
            f"To train it longer: rlvr train --resume {self.path} train.steps={2 * steps}"
        )


def _eval_only(record: dict) -> bool:
    return all(k == "step" or k.startswith("eval/") or k == "time/eval" for k in record)


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise
            # the last line alone may be cut short: a kill or a full disk mid-write
    return records


def _replace_jsonl(path: Path, records: list[dict]) -> None:
    """Rewrite through a temporary file, so a full disk leaves the old file whole."""
    if not path.exists():
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    os.replace(tmp, path)
