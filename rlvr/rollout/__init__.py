"""Rollout: engines that sample tokens, and the runner that turns episodes into Trajectories."""

from __future__ import annotations

from rlvr.config import Config
from rlvr.rollout.engine import Completion, Engine, SamplingParams, sample_seed
from rlvr.rollout.hf_engine import HFEngine, eos_ids
from rlvr.rollout.runner import EpisodeRunner
from rlvr.rollout.vllm_engine import VLLMEngine

__all__ = [
    "ENGINES",
    "Completion",
    "Engine",
    "EpisodeRunner",
    "HFEngine",
    "SamplingParams",
    "sample_seed",
]


def build_hf(cfg: Config, model, tokenizer, model_path: str) -> Engine:
    """The embedded engine: decodes with the training model itself, so weight sync is free."""
    return HFEngine(model, tokenizer, cfg.rollout.max_batch_size)


def build_vllm(cfg: Config, model, tokenizer, model_path: str) -> Engine:
    """vLLM (`pip install rlvr[vllm]`): loads the model's architecture from its path and takes
    the policy's weights after every update."""
    r = cfg.rollout
    return VLLMEngine(
        model_path, tokenizer, eos_ids(model, tokenizer), r.vllm, cfg.model.dtype,
        r.max_batch_size, cfg.model.trust_remote_code, cfg.train.seed,
        lora_rank=cfg.model.lora.r if r.vllm.lora_sync == "adapter" else 0,
    )  # fmt: skip


# rollout.engine's names: each a builder (cfg, model, tokenizer, model_path) -> Engine
ENGINES = {"hf": build_hf, "vllm": build_vllm}
