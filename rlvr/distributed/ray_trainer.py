"""Trainer ranks beyond the first as Ray actors: each holds a replica of the policy and its
optimizer, joins this process (rank 0) in a gloo (CPU) or NCCL (GPU) group, and computes its
share of every update, so the replicas take identical steps."""

from __future__ import annotations

import socket
from datetime import timedelta

import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from rlvr.config import Config
from rlvr.distributed.data_parallel import DataParallel
from rlvr.distributed.ray_rollout import (
    RolloutTimeoutError,
    placement_lines,
    ray_module,
    where,
)
from rlvr.models.loading import load_model, resolve_device
from rlvr.models.lora import apply_lora, trainable_state_dict
from rlvr.train.update import UpdateInputs, UpdateResult, policy_update


def build_replica(cfg: Config, tokenizer: PreTrainedTokenizerBase, model_path: str):
    """The policy, its optimizer and scheduler and the loss functions, as rank 0 builds them."""
    from rlvr.train.setup import build_components
    from rlvr.train.trainer import make_optimizer, make_scheduler

    m, components = cfg.model, build_components(cfg)
    model, _ = load_model(model_path, m.dtype, m.trust_remote_code, tokenizer)
    if m.lora.r > 0:
        model = apply_lora(model, m.lora)
    model = model.to(resolve_device(m.device))
    optimizer = make_optimizer(cfg, model)
    kl = None if cfg.algo.kl_in_reward else components.kl
    return model, optimizer, make_scheduler(cfg, optimizer), components.loss, kl


class TrainerRank:
    """One data-parallel rank (made remote by RayUpdateGroup)."""

    def __init__(self, cfg: Config, tokenizer: PreTrainedTokenizerBase, model_path: str,
                 rank: int):  # fmt: skip
        torch.set_num_threads(cfg.distributed.torch_threads)
        self.cfg, self.rank = cfg, rank
        self.model, self.optimizer, self.scheduler, self.loss, self.kl = build_replica(
            cfg, tokenizer, model_path
        )

    def join(self, init_method: str, world_size: int, backend: str) -> dict:
        timeout = timedelta(seconds=self.cfg.distributed.rollout_timeout)
        dist.init_process_group(backend, init_method=init_method, rank=self.rank,
                                world_size=world_size, timeout=timeout)  # fmt: skip
        return where()

    def load(self, weights: dict, optimizer: dict, scheduler: dict) -> None:
        self.model.load_state_dict(weights, strict=False)
        self.optimizer.load_state_dict(optimizer)
        self.scheduler.load_state_dict(scheduler)

    def update(self, data: UpdateInputs, rng_state: torch.Tensor) -> None:
        generator = torch.Generator().set_state(rng_state)
        parallel = DataParallel(self.rank, dist.get_world_size())
        policy_update(self.model, self.optimizer, self.scheduler, data, self.cfg, self.loss,
                      self.kl, generator, parallel)  # fmt: skip

    def weights_checksum(self) -> float:
        return float(sum(p.double().sum() for p in trainable_state_dict(self.model).values()))

    def leave(self) -> None:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class RayUpdateGroup:
    """Rank 0 (this process) plus distributed.trainer_ranks - 1 TrainerRank actors placed in
    the bundles the rollout workers' placement group set aside for them."""

    def __init__(self, cfg: Config, tokenizer, model_path: str, bundles: list, actor_options: dict):
        ray = ray_module()
        self.timeout, world = cfg.distributed.rollout_timeout, cfg.distributed.trainer_ranks
        options = {k: v for k, v in actor_options.items() if k != "max_task_retries"}
        options["max_restarts"] = 0  # a rank that dies loses its optimizer state: stop the run
        remote = ray.remote(TrainerRank)
        self.ranks = [
            remote.options(**options, scheduling_strategy=bundles[i - 1]).remote(
                cfg, tokenizer, model_path, i
            )
            for i in range(1, world)
        ]
        backend = "nccl" if torch.cuda.is_available() and cfg.distributed.worker_gpus else "gloo"
        init = f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"
        joined = [r.join.remote(init, world, backend) for r in self.ranks]
        dist.init_process_group(backend, init_method=init, rank=0, world_size=world,
                                timeout=timedelta(seconds=self.timeout))  # fmt: skip
        self.placement = [where(), *self._get(joined)]
        self.parallel = DataParallel(0, world)

    def load(self, model, optimizer, scheduler) -> None:
        """Make every replica equal to rank 0 (at the start, and after a resume)."""
        weights = {k: v.detach().cpu() for k, v in trainable_state_dict(model).items()}
        state = (weights, optimizer.state_dict(), scheduler.state_dict())
        self._get([r.load.remote(*state) for r in self.ranks])

    def update(
        self, model, optimizer, scheduler, data, cfg, loss_fn, kl_fn, generator
    ) -> UpdateResult:
        started = [r.update.remote(data, generator.get_state()) for r in self.ranks]
        result = policy_update(model, optimizer, scheduler, data, cfg, loss_fn, kl_fn, generator,
                               self.parallel)  # fmt: skip
        self._get(started)
        return result

    def describe(self) -> list[str]:
        return placement_lines("trainer rank", self.placement)

    def checksums(self) -> list[float]:
        return self._get([r.weights_checksum.remote() for r in self.ranks])

    def _get(self, refs: list) -> list:
        ray = ray_module()
        try:
            return ray.get(refs, timeout=self.timeout)
        except ray.exceptions.GetTimeoutError:
            raise RolloutTimeoutError(
                f"trainer ranks did not answer within distributed.rollout_timeout = "
                f"{self.timeout:g} s; see /tmp/ray/session_latest/logs"
            ) from None

    def close(self) -> None:
        ray = ray_module()
        try:
            self._get([r.leave.remote() for r in self.ranks])
        finally:
            dist.destroy_process_group()
            for r in self.ranks:
                ray.kill(r)
