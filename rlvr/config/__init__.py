"""One typed config tree for a run, loaded from TOML/YAML plus dotted command-line overrides.

Every field's description is the documentation: `docs/config.md` is generated from it. One
module per section (model, task, rollout, algo, train, log, distributed, multi), the root
Config (root), the checks across sections (checks), loading and dumping (loading) and the
reference page (reference); callers import from `rlvr.config`.
"""

from rlvr.config.algo import AlgoConfig
from rlvr.config.base import ConfigError, Section, refuse_clashes, suggest
from rlvr.config.distributed import DistributedConfig
from rlvr.config.loading import (
    RENAMED,
    build_config,
    dump_config,
    load_config,
    read_file,
    set_dotted,
)
from rlvr.config.log import LogConfig
from rlvr.config.model import LoraSettings, ModelConfig
from rlvr.config.multi import CohortConfig, DebateConfig
from rlvr.config.reference import config_reference
from rlvr.config.rollout import RolloutConfig, VLLMSettings
from rlvr.config.root import Config
from rlvr.config.task import TaskConfig
from rlvr.config.train import MonitorRule, TrainConfig

__all__ = [
    "RENAMED",
    "AlgoConfig",
    "CohortConfig",
    "Config",
    "ConfigError",
    "DebateConfig",
    "DistributedConfig",
    "LogConfig",
    "LoraSettings",
    "ModelConfig",
    "MonitorRule",
    "RolloutConfig",
    "Section",
    "TaskConfig",
    "TrainConfig",
    "VLLMSettings",
    "build_config",
    "config_reference",
    "dump_config",
    "load_config",
    "read_file",
    "refuse_clashes",
    "set_dotted",
    "suggest",
]
