"""Several Trainers stepped together (a Co-RL cohort, a MADA-RL debate), each on its own model
or as a named LoRA adapter of one shared model; what they share: run, stop, resume, close."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from rlvr.models.lora import use_adapter
from rlvr.train.faults import TrainingInterrupted, stop_at_step_end
from rlvr.train.trainer import Trainer


class TrainerGroup:
    """`members` train in lockstep; `adapters[i]` names member i's adapter on member 0's model,
    which every member with an adapter shares (None: the member holds its own model).
    Subclasses write `train`."""

    path: Path
    members: list[Trainer]
    adapters: list[str | None]

    def acting(self, index: int):
        """Within the block member `index`'s adapter is the one that computes and trains (for a
        member on a shared model; nothing to switch otherwise)."""
        adapter = self.adapters[index]
        if adapter is None or not self.members:  # member 0 itself, before it exists
            return nullcontext()
        return use_adapter(self.members[0].model, adapter)

    def train(self, stop_requested) -> dict:
        raise NotImplementedError

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
