"""What a person sees during a run: a live progress bar with metrics, or plain log lines."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

SHOWN = {
    "sft_loss": "loss",
    "reward": "reward",
    "accuracy": "acc",
    "cohort/agreement": "agree",
    "debate/critic_accuracy": "critic_acc",
    "debate/fixed": "fixed",
    "kl": "kl",
    "eval/accuracy": "eval_acc",
    "time/step": "s/step",
}


def brief(metrics: dict[str, float]) -> str:
    return "  ".join(
        f"{label} {metrics[key]:.3f}" for key, label in SHOWN.items() if key in metrics
    )


class Display:
    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.console = Console(stderr=True)
        self._progress: Progress | None = None
        self._task = None
        self._last: dict[str, float] = {}
        self._log_every = 1
        self._phase, self._total = "", 0  # quiet lines name the bar and its total: "rl 10/20"

    @contextmanager
    def bar(self, description: str, total: int, completed: int = 0):
        self._last = {}
        if self.quiet:
            self._log_every = max(1, total // 20)  # ~20 log lines per bar
            self._phase, self._total = description, total
            yield self
            return
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[metrics]}"),
            console=self.console,
            transient=False,
        )
        self._progress = progress
        self._task = progress.add_task(description, total=total, completed=completed, metrics="")
        with progress:
            yield self
        self._progress = None

    def update(self, step: int, metrics: dict[str, float]) -> None:
        self._last.update({k: v for k, v in metrics.items() if k in SHOWN})
        if self._progress is not None:
            self._progress.update(self._task, completed=step, metrics=brief(self._last))
        elif step % self._log_every == 0 or "eval/accuracy" in metrics:
            print(
                f"{time.strftime('%H:%M:%S')} {self._phase} {step}/{self._total}  "
                f"{brief(self._last)}",
                file=sys.stderr,
                flush=True,
            )

    def message(self, text: str) -> None:
        """A line above the bar; rich markup ([yellow]...) is dropped in quiet mode's plain lines."""
        if self.quiet:
            print(Text.from_markup(text).plain, file=sys.stderr, flush=True)
        else:
            self.console.print(text)

    def summary(self, title: str, rows: list[tuple[str, str, str]]) -> None:
        self.console.print(title)
        table = Table()
        for column in ("metric", "base", "final"):
            table.add_column(column)
        for row in rows:
            table.add_row(*row)
        self.console.print(table)
