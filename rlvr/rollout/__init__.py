"""Rollout: engines that sample tokens, and the runner that turns episodes into Trajectories."""

from rlvr.rollout.engine import Completion, Engine, SamplingParams, sample_seed
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.runner import EpisodeRunner

__all__ = ["Completion", "Engine", "EpisodeRunner", "HFEngine", "SamplingParams", "sample_seed"]
