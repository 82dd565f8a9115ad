"""The `log` section: where a run writes, how it shows progress, and which trackers it
feeds."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section


class LogConfig(Section):
    run_dir: str = Field("runs", description="Parent directory of run directories.")
    name: str | None = Field(None, description="Run name; default is '<task>-<timestamp>'.")
    quiet: bool = Field(False, description="Plain log lines instead of a live progress bar.")
    report: bool = Field(
        True,
        description="Write report.png and report.html when the run ends. Their plots take about "
        "2 s, most of a very short run's finish: sweeps of such runs can skip them and write a "
        "page later with `rlvr report RUN`.",
    )
    report_to: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = Field(
        default_factory=list,
        description="Experiment trackers fed every metrics.jsonl record, as TRL's report_to: "
        "'tensorboard' (run_dir/tensorboard), 'wandb' (WANDB_MODE=offline keeps it on disk), "
        "'mlflow' (MLFLOW_TRACKING_URI, else run_dir/mlflow.db), 'trackio' (local); each is an "
        "extra: pip install -e '.[tensorboard]' etc.",
    )
    project: str = Field("rlvr", description="The wandb / trackio project, the MLflow experiment.")
    samples_per_step: int = Field(
        8,
        ge=0,
        description="The first samples of each step's batch (whole groups first) written to "
        "samples.jsonl: prompt, reply, reward, status and advantage; 0 = none.",
    )
