"""Several Trainers stepped together (the runners of rlvr/methods/runners.py), each on its own
model or as a named LoRA adapter of one shared model; what they share: run, stop, resume, close."""

from __future__ import annotations

import shutil
import time
from contextlib import nullcontext
from pathlib import Path

from rlvr.config import Config, ConfigError, dump_config
from rlvr.models.lora import use_adapter
from rlvr.train.checkpoint import checkpoint_step, complete_checkpoints
from rlvr.train.faults import TrainingInterrupted, stop_at_step_end
from rlvr.train.trainer import Trainer


def common_step(checkpoint_dirs: list[Path]) -> int | None:
    """The newest step every member checkpointed (a kill between two members' saves leaves one a
    save ahead), or None."""
    saved = [set(map(checkpoint_step, complete_checkpoints(d))) for d in checkpoint_dirs]
    return max(set.intersection(*saved), default=None)


class TrainerGroup:
    """`members` train in lockstep; `adapters[i]` names member i's adapter on member 0's model,
    which every member with an adapter shares (None: the member holds its own model).
    Subclasses write `train`."""

    path: Path
    members: list[Trainer]
    adapters: list[str | None]

    def name_dir(self, cfg: Config, kind: str, resume: Path | None) -> None:
        """self.path: `resume`, else runs/<kind>-<task>-<time> (or log.name)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = cfg.log.name or f"{kind}-{cfg.task.name.replace(':', '_')}-{stamp}"
        self.path = resume or Path(cfg.log.run_dir) / name

    def open_dir(
        self, cfg: Config, kind: str, resume: Path | None, members: list[str]
    ) -> int | None:
        """A resume returns the newest step every member (a folder under self.path)
        checkpointed; with none, their checkpoints go and each starts over. A fresh start
        refuses a non-empty directory and writes the config."""
        checkpoints = [self.path / member / "checkpoints" for member in members]
        if resume:
            step = common_step(checkpoints)
            if step is None:
                for directory in checkpoints:
                    shutil.rmtree(directory, ignore_errors=True)
            return step
        if self.path.exists() and any(self.path.iterdir()):
            raise ConfigError(
                f"{kind} directory {self.path} is not empty; fix: `rlvr train --resume "
                f"{self.path}` to continue it, or set log.name to a new name"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "config.yaml").write_text(dump_config(cfg))
        return None

    def acting(self, index: int):
        """Within the block member `index`'s adapter is the one that computes and trains (for a
        member on a shared model; nothing to switch otherwise)."""
        adapter = self.adapters[index]
        if adapter is None or not self.members:  # member 0 itself, before it exists
            return nullcontext()
        return use_adapter(self.members[0].model, adapter)

    def run(self) -> dict:
        """Train every member to train.steps; the first Ctrl-C stops after the current step with
        a checkpoint of every member."""
        try:
            with stop_at_step_end() as stop_requested:
                return self.train(stop_requested)
        except KeyboardInterrupt:
            raise TrainingInterrupted(f"interrupted mid-step; {self.resume_hint()}") from None
        finally:
            self.close()

    def stop(self) -> None:
        for index, member in enumerate(self.members):
            with self.acting(index):
                member.save_if_new()
        raise TrainingInterrupted(
            f"stopped after step {self.members[0].state['step']}; {self.resume_hint()}"
        )

    def resume_hint(self) -> str:
        return (
            f"`rlvr train --resume {self.path}` continues every member from the newest step all "
            "of them saved"
        )

    def close(self) -> None:
        for member in self.members:
            member.close()
