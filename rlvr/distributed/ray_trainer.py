"""Trainer ranks beyond the first as Ray actors: each joins this process (rank 0) in a gloo
(CPU) or NCCL (GPU) group and computes its share of every update, holding either a replica of
the policy and its optimizer or (distributed.trainer_sharding = "fsdp") 1/N of them."""

from __future__ import annotations

import copy
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from rlvr.config import Config
from rlvr.distributed.ray_rollout import (
    RolloutTimeoutError,
    get_within,
    placement_lines,
    ray_module,
    where,
)
from rlvr.distributed.sharded import (
    copy_full_trainable,
    full_optimizer_state,
    load_full_state,
    local_numel,
    shard_model,
)
from rlvr.models.loading import load_model, resolve_device
from rlvr.models.lora import apply_lora, trainable_state_dict
from rlvr.train.checkpoint import Restored
from rlvr.train.data_parallel import DataParallel
from rlvr.train.update import (
    UpdateInputs,
    UpdateResult,
    make_optimizer,
    make_scheduler,
    policy_update,
    scale_lr,
)

T = TypeVar("T")


class TrainerRankError(RuntimeError):
    """A trainer rank failed in the middle of a collective step, so the others cannot finish it."""


def build_replica(cfg: Config, tokenizer: PreTrainedTokenizerBase, model_path: str):
    """The policy and the loss functions, as rank 0 builds them."""
    from rlvr.train.components import build_components

    m, components = cfg.model, build_components(cfg)
    model, _ = load_model(model_path, m.dtype, m.trust_remote_code, tokenizer)
    if m.lora.r > 0:
        model = apply_lora(model, m.lora)
    model = model.to(resolve_device(m.device))
    kl = None if cfg.algo.kl_in_reward else components.kl
    return model, components.loss, kl


class TrainerRank:
    """One data-parallel rank (made remote by RayUpdateGroup)."""

    def __init__(self, cfg: Config, tokenizer: PreTrainedTokenizerBase, model_path: str,
                 rank: int):  # fmt: skip
        torch.set_num_threads(cfg.distributed.torch_threads)
        self.cfg, self.rank = cfg, rank
        self.sharded = cfg.distributed.trainer_sharding == "fsdp"
        self.model, self.loss, self.kl = build_replica(cfg, tokenizer, model_path)
        self.total = local_numel(self.model)

    def join(self, init_method: str, world_size: int, backend: str) -> dict:
        timeout = timedelta(seconds=self.cfg.distributed.rollout_timeout)
        dist.init_process_group(backend, init_method=init_method, rank=self.rank,
                                world_size=world_size, timeout=timeout)  # fmt: skip
        if self.sharded:
            shard_model(self.model)
        self.parallel = DataParallel.join(self.model, self.sharded)  # DDP when replicated
        self.optimizer = make_optimizer(self.cfg, self.model)  # over the shards, if sharded
        self.scheduler = make_scheduler(self.cfg, self.optimizer)
        return where()

    def load(self, weights: dict, optimizer_state: dict | None, scheduler_state: dict) -> None:
        if self.sharded:  # rank 0 broadcasts the weights and (when resuming) optimizer state
            load_full_state(self.model, self.optimizer, {}, optimizer_state)
        else:
            self.model.load_state_dict(weights, strict=False)
            self.optimizer.load_state_dict(optimizer_state)
        self.scheduler.load_state_dict(scheduler_state)

    def update(self, data: UpdateInputs, rng_state: torch.Tensor) -> None:
        generator = torch.Generator().set_state(rng_state)
        policy_update(self.model, self.optimizer, self.scheduler, data, self.cfg, self.loss,
                      self.kl, generator, self.parallel)  # fmt: skip
        if self.sharded:
            copy_full_trainable(self.model, None)  # rank 0 gathers the new weights

    def scale_lr(self, factor: float) -> None:
        scale_lr(self.optimizer, self.scheduler, factor)

    def optimizer_state(self) -> None:
        full_optimizer_state(self.model, self.optimizer)  # gathered on rank 0 only

    def held_share(self) -> float:
        return local_numel(self.model) / self.total

    def weights_checksum(self) -> float:
        return float(sum(p.double().sum() for p in trainable_state_dict(self.model).values()))

    def leave(self) -> None:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class GatheredOptimizer:
    """What a checkpoint saves of a sharded optimizer: its state gathered whole on rank 0."""

    def __init__(self, group: RayUpdateGroup):
        self.group = group

    def state_dict(self) -> dict:
        started = [r.optimizer_state.remote() for r in self.group.ranks]
        g = self.group
        return g._alongside(started, lambda: full_optimizer_state(g.trained, g.local_optimizer))


class RayUpdateGroup:
    """Rank 0 (this process) plus distributed.trainer_ranks - 1 TrainerRank actors placed in
    the bundles the rollout workers' placement group set aside for them.

    Replicated, rank 0 trains `model` itself. Sharded, it trains a sharded copy and gathers
    each update into `model`, which the rollout, the old logprobs and checkpoints read."""

    def __init__(self, cfg: Config, tokenizer, model_path: str, bundles: list, actor_options: dict,
                 model):  # fmt: skip
        ray = ray_module()
        self.cfg, self.timeout = cfg, cfg.distributed.rollout_timeout
        self.sharded, world = (
            cfg.distributed.trainer_sharding == "fsdp",
            cfg.distributed.trainer_ranks,
        )
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
        # the copy is whole until shard_model frees all but rank 0's shards
        self.trained = shard_model(copy.deepcopy(model)) if self.sharded else model
        self.held = local_numel(self.trained) / local_numel(model)
        self.parallel = DataParallel.join(self.trained, self.sharded)  # DDP when replicated
        self.local_optimizer = make_optimizer(cfg, self.trained)
        self.scheduler = make_scheduler(cfg, self.local_optimizer)
        self.optimizer = GatheredOptimizer(self) if self.sharded else self.local_optimizer
        self.placement = [where(), *self._get(joined)]
        self.share_thread: threading.Thread | None = None  # rank 0's share of the last step
        self.broken = False  # a rank failed mid-step, so the ranks cannot leave the group in step

    def load(self, model, restored: Restored | None) -> None:
        """Make every rank equal to rank 0 at the start, with a resumed run's optimizer and
        scheduler state (None: a fresh start)."""
        if restored is not None:
            self.scheduler.load_state_dict(restored.scheduler)
        if self.sharded:
            optimizer_state = restored.optimizer if restored else None
            started = [
                r.load.remote(None, {} if restored else None, self.scheduler.state_dict())
                for r in self.ranks
            ]
            load_full_state(self.trained, self.local_optimizer, trainable_state_dict(model),
                            optimizer_state)  # fmt: skip
            self._get(started)
            return
        if restored is not None:
            self.local_optimizer.load_state_dict(restored.optimizer)
        weights = {k: v.detach().cpu() for k, v in trainable_state_dict(model).items()}
        state = (weights, self.local_optimizer.state_dict(), self.scheduler.state_dict())
        self._get([r.load.remote(*state) for r in self.ranks])

    def update(self, model, data: UpdateInputs, loss_fn, kl_fn, generator) -> UpdateResult:
        started = [r.update.remote(data, generator.get_state()) for r in self.ranks]

        def local_share() -> UpdateResult:
            result = policy_update(self.trained, self.local_optimizer, self.scheduler, data,
                                   self.cfg, loss_fn, kl_fn, generator, self.parallel)  # fmt: skip
            if self.sharded:
                copy_full_trainable(self.trained, model)
            return result

        return self._alongside(started, local_share)

    def _alongside(self, started: list, local_share: Callable[[], T]) -> T:
        """Rank 0's share of a collective step, run while the other ranks run theirs (`started`).
        A rank that raises never reaches the next collective, and its peers would wait there for
        the process group's whole timeout; so rank 0's share runs on a thread, and this one
        stops the run with the failing rank's error as soon as Ray reports it."""
        ray = ray_module()
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["result"] = local_share()
            except BaseException as e:  # raised again on the caller's thread
                outcome["error"] = e

        self.share_thread = threading.Thread(target=run, name="rank-0-share", daemon=True)
        self.share_thread.start()
        pending = list(started)
        while self.share_thread.is_alive():
            if not pending:
                self.share_thread.join(timeout=0.05)
                continue
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0.05)
            self._raise_failed(ready, started)
        if "error" in outcome:
            self.broken = True  # the other ranks may wait on rank 0 in a collective
            raise outcome["error"]
        self._raise_failed(pending, started)
        return outcome["result"]

    def _raise_failed(self, refs: list, started: list) -> None:
        ray = ray_module()
        for ref in refs:
            try:
                self._get([ref])
            except RolloutTimeoutError:
                self.broken = True
                raise
            except ray.exceptions.RayError as e:
                self.broken = True
                cause = getattr(e, "cause", None) or e  # a task's own exception, else Ray's
                raise TrainerRankError(
                    f"trainer rank {1 + started.index(ref)} failed during a collective step "
                    f"({type(cause).__name__}: {cause}), so the other ranks cannot finish it and "
                    "the run stops; `rlvr train --resume` continues from its last checkpoint. "
                    f"The rank's report:\n{e}"
                ) from None

    def scale_lr(self, factor: float) -> None:
        scale_lr(self.local_optimizer, self.scheduler, factor)
        self._get([r.scale_lr.remote(factor) for r in self.ranks])

    def describe(self) -> list[str]:
        lines = placement_lines("trainer rank", self.placement)
        if self.sharded:
            lines.append(
                f"trainer: FSDP2 over {len(self.placement)} ranks, each holding "
                f"{self.held:.0%} of the weights, gradients and optimizer state"
            )
        return lines

    def held_shares(self) -> list[float]:
        """The share of the policy's weights each rank holds (1.0 each when replicated)."""
        return [self.held, *self._get([r.held_share.remote() for r in self.ranks])]

    def checksums(self) -> list[float]:
        return self._get([r.weights_checksum.remote() for r in self.ranks])

    def _get(self, refs: list) -> list:
        return get_within(refs, self.timeout, "trainer ranks did not answer")

    def close(self) -> None:
        ray = ray_module()
        if self.broken:
            for r in self.ranks:
                ray.kill(r)
            if self.share_thread is not None:  # its collective fails once its peers are gone
                self.share_thread.join(timeout=self.timeout)
            if self.share_thread is None or not self.share_thread.is_alive():
                dist.destroy_process_group()
            return
        try:
            self._get([r.leave.remote() for r in self.ranks])
        finally:
            dist.destroy_process_group()
            for r in self.ranks:
                ray.kill(r)
