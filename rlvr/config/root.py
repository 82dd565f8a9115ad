"""The root of the config tree, Config: one field per section, the cross-section checks
(rlvr/config/checks.py) run after validation, and the run's hash."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, model_validator

from rlvr.config.algo import AlgoConfig
from rlvr.config.base import Section
from rlvr.config.checks import CHECKS
from rlvr.config.distributed import DistributedConfig
from rlvr.config.log import LogConfig
from rlvr.config.model import ModelConfig
from rlvr.config.multi import CohortConfig, DebateConfig
from rlvr.config.rollout import RolloutConfig
from rlvr.config.task import TaskConfig
from rlvr.config.train import TrainConfig


class Config(Section):
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model.")
    task: TaskConfig = Field(
        default_factory=TaskConfig, description="Where problems come from and how they are scored."
    )
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling.")
    algo: AlgoConfig = Field(default_factory=AlgoConfig, description="Advantage, loss and KL.")
    train: TrainConfig = Field(
        default_factory=TrainConfig, description="Optimisation and schedule."
    )
    log: LogConfig = Field(default_factory=LogConfig, description="Run directory and display.")
    distributed: DistributedConfig = Field(
        default_factory=DistributedConfig, description="Ray rollout workers and trainer ranks."
    )
    cohort: CohortConfig = Field(
        default_factory=CohortConfig, description="Several policies trained together (Co-RL)."
    )
    debate: DebateConfig = Field(
        default_factory=DebateConfig,
        description="A generator and a critic on one base, trained together (MADA-RL).",
    )
    methods: dict[str, dict[str, Any] | None] = Field(
        default_factory=dict,
        description="Research methods that act on the loop, each a table of its own settings: "
        "methods.<name>.<key> (`rlvr list methods`; a plug-in by `module:attr`). An empty table "
        "(methods.repexp={}) runs a method with its defaults; methods.<name>=null turns off one "
        "that a file enables.",
    )

    @model_validator(mode="after")
    def _check_combinations(self) -> Config:
        """Settings that each validate alone but not together: the first clash found raises."""
        for check in CHECKS:
            check(self)
        return self

    def hash(self) -> str:
        """Hash of what determines the run's numbers (not where it logs)."""
        import hashlib

        data = self.model_dump(
            mode="json",
            exclude={
                "log": True,
                "train": {"steps"},
                "distributed": {"address", "rollout_timeout", "max_restarts"},
            },
        )
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
