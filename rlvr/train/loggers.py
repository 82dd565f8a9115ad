"""Standard experiment trackers fed from the metrics stream (log.report_to): TensorBoard,
Weights & Biases, MLflow and trackio, each an optional extra; metrics.jsonl is always written."""

from __future__ import annotations

import importlib.util
import os
import re
import time
from pathlib import Path

from rlvr.config import Config, ConfigError


def numeric(metrics: dict) -> dict[str, float]:
    """The metrics a tracker can plot: numbers (a flag as 0 or 1), not text or the step."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and k != "step"}


class TensorBoard:
    """Scalars in `run_dir`/tensorboard (`tensorboard --logdir runs/`)."""

    def __init__(self, cfg: Config, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Wandb:
    """A Weights & Biases run in `run_dir`/wandb, project log.project; WANDB_MODE=offline (or no
    login) keeps it on disk for `wandb sync` later."""

    def __init__(self, cfg: Config, run_dir: Path):
        import wandb

        self.run = wandb.init(
            project=cfg.log.project, name=run_dir.name, dir=str(run_dir),
            config=cfg.model_dump(mode="json"), reinit="create_new",
        )  # fmt: skip

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class MLflow:
    """An MLflow run in experiment log.project, at MLFLOW_TRACKING_URI or a local SQLite store,
    `run_dir`/mlflow.db (`mlflow ui --backend-store-uri sqlite:///.../mlflow.db`). MLflow
    names allow no '@', so pass@k is logged as pass_at_k."""

    def __init__(self, cfg: Config, run_dir: Path):
        import mlflow

        self.client = mlflow.MlflowClient(
            os.environ.get("MLFLOW_TRACKING_URI") or local_mlflow_uri(run_dir)
        )
        experiment = self.client.get_experiment_by_name(cfg.log.project)
        experiment_id = (
            experiment.experiment_id
            if experiment
            else self.client.create_experiment(cfg.log.project)
        )
        self.run_id = self.client.create_run(experiment_id, run_name=run_dir.name).info.run_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        stamp = _now_ms()
        batch = [Metric(mlflow_name(k), v, stamp, step) for k, v in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def mlflow_name(key: str) -> str:
    return re.sub(r"[^\w./\- ]", "_", key.replace("@", "_at_"))


def local_mlflow_uri(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"


def _now_ms() -> int:
    return int(time.time() * 1000)


class Trackio:
    """A trackio run in project log.project, stored locally (TRACKIO_DIR)."""

    def __init__(self, cfg: Config, run_dir: Path):
        import trackio

        self.trackio = trackio
        self.run = trackio.init(
            project=cfg.log.project, name=run_dir.name, config=cfg.model_dump(mode="json"),
            embed=False, auto_log_cpu=False, auto_log_gpu=False,
        )  # fmt: skip

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.trackio.log(metrics, step=step)

    def close(self) -> None:
        self.trackio.finish()


LOGGERS = {"tensorboard": TensorBoard, "wandb": Wandb, "mlflow": MLflow, "trackio": Trackio}


def check_installed(cfg: Config) -> None:
    """A ConfigError, before any work, naming each log.report_to tracker that is not installed
    and the line that installs it."""
    missing = [n for n in cfg.log.report_to if importlib.util.find_spec(n) is None]
    if missing:
        extras = ",".join(missing)
        raise ConfigError(
            f"log.report_to = {cfg.log.report_to}, but {', '.join(missing)} is not installed; fix: "
            f"pip install -c constraints.txt -e '.[{extras}]', or drop it from log.report_to"
        )


class Trackers:
    """The run's trackers, each fed every record the run writes to metrics.jsonl."""

    def __init__(self, cfg: Config, run_dir: Path):
        check_installed(cfg)
        self.loggers = [LOGGERS[name](cfg, run_dir) for name in cfg.log.report_to]

    def log(self, record: dict) -> None:
        metrics = numeric(record)
        if metrics:
            for logger in self.loggers:
                logger.log(int(record["step"]), metrics)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
        self.loggers = []
