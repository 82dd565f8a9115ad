"""`rlvr serve` on Ray (distributed.backend = "ray"): every training client replicated on the
trainer ranks, which split each forward_backward by datums and sum gradients at optim_step, and
sampling on rollout workers, each with its own copy of the base."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from functools import partial

import numpy as np
import torch
import torch.distributed as dist

from rlvr.config import ConfigError, DistributedConfig
from rlvr.distributed.ray_rollout import (
    WorkerDiedError,
    connect,
    get_within,
    placement_lines,
    ray_module,
    where,
)
from rlvr.distributed.ray_trainer import TrainerRankError, free_port
from rlvr.models.loading import load_model
from rlvr.serve.adapters import AdapterHost
from rlvr.serve.sampler import Sampler, VLLMSampling
from rlvr.serve.wire import Datum

KEPT_VERSIONS = 8  # saved weights kept in Ray's object store for the rollout workers


class Replica:
    """One actor's copy of the base and its adapters: a trainer rank or a rollout worker (made
    remote by Cluster)."""

    def __init__(self, name: str, path: str, threads: int, sampling: VLLMSampling | None):
        torch.set_num_threads(threads)
        model, tokenizer = load_model(path, key="rlvr serve --model")
        engine = sampling.engine(path, model, tokenizer) if sampling else None
        if ray_module().get_gpu_ids():
            model = model.to("cuda")
        self.host = AdapterHost(name, model, tokenizer)
        self.sampler = Sampler(self.host, engine=engine)

    def join(self, init_method: str, rank: int, world_size: int, timeout: float) -> None:
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout))  # fmt: skip
        self.host.group = dist.group.WORLD

    def apply(self, method: str, *args) -> None:
        """A change every rank makes alike (add, load), or a step (optim_step)."""
        getattr(self.host, method)(*args)

    def forward_backward(self, *args) -> tuple[list[np.ndarray], dict[str, float]]:
        return self.host.forward_backward(*args)

    def state(self, name: str) -> dict:
        """This rank's copy of a client, as a checkpoint holds it (rank 0's is the one saved)."""
        return self.host.state(name, optimizer=True)

    def sample(self, version: str | None, weights: list, *args):
        """Sampler.sample; `weights` is [ObjectRef] (wrapped, so Ray fetches it only when this
        worker has not loaded `version`) or [] for the base."""
        return self.sampler.sample(version, lambda: ray_module().get(weights[0]), *args)

    def where(self) -> dict:
        return where()

    def leave(self) -> None:
        dist.destroy_process_group()


class RankedTrainer:
    """The training clients on rank 0 (`host`, in this process) and its peers. Every change
    reaches every rank in one order (the service calls from one thread, and Ray keeps a caller's
    order per actor), so the replicas stay equal."""

    def __init__(self, host: AdapterHost, ranks: list, timeout: float):
        self.host, self.ranks, self.timeout = host, ranks, timeout
        self.broken: str | None = None  # why the ranks may differ now

    def add(self, name: str, lora: dict) -> None:
        self._everywhere("add", name, lora)

    def load(self, name: str, state: dict, optimizer: bool) -> None:
        self._everywhere("load", name, state, optimizer)

    def optim_step(self, name: str, adam: dict) -> dict[str, float]:
        return self._everywhere("optim_step", name, adam)  # each rank sums the gradients first

    def state(self, name: str, optimizer: bool) -> dict:
        return self.host.state(name, optimizer)

    def forward_backward(
        self, name: str, data: list[Datum], loss_fn: str | None, config: dict, backward: bool
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Rank r takes the r-th contiguous share of the datums; the logprobs come back in the
        datums' order and the loss is the sum of the shares' (Tinker's losses are sums)."""
        self._refuse_if_broken()
        self.host.check(data, loss_fn, config)  # refused here, before any rank starts
        shares = np.array_split(np.arange(len(data)), len(self.ranks) + 1)
        part = [[data[i] for i in share] for share in shares]
        started = [
            rank.forward_backward.remote(name, share, loss_fn, config, backward)
            for rank, share in zip(self.ranks, part[1:], strict=True)
            if share
        ]
        here = partial(self.host.forward_backward, name, part[0], loss_fn, config, backward)
        results = [self._run(here, started), *self._get(started)]
        logprobs = [row for rows, _ in results for row in rows]
        metrics = {k: sum(m[k] for _, m in results) for k in results[0][1]}
        return logprobs, metrics

    def _everywhere(self, method: str, *args):
        self._refuse_if_broken()
        started = [rank.apply.remote(method, *args) for rank in self.ranks]
        result = self._run(partial(getattr(self.host, method), *args), started)
        self._get(started)
        return result

    def _refuse_if_broken(self) -> None:
        if self.broken:
            raise TrainerRankError(self.broken)

    def _run(self, here: Callable, started: list):
        """Rank 0's part, while the peers run theirs; a failure leaves the ranks unequal."""
        try:
            return here()
        except (ValueError, KeyError):  # every rank refuses it alike, and changes nothing
            ray_module().wait(started, num_returns=len(started), timeout=self.timeout)
            raise
        except BaseException as error:
            self.broken = (
                f"rank 0 failed mid-call ({type(error).__name__}: {error}), so the trainer ranks "
                "may differ; restart rlvr serve and load the last checkpoint"
            )
            raise

    def _get(self, refs: list) -> list:
        ray = ray_module()
        try:
            return ray.get(refs, timeout=self.timeout)
        except ray.exceptions.RayError as error:
            self.broken = (
                f"a trainer rank failed ({type(error).__name__}), so the ranks may differ; restart "
                f"rlvr serve and load the last checkpoint. Ray's report:\n{error}"
            )
            raise TrainerRankError(self.broken) from None


class RolloutWorkers:
    """Sampling on Replica actors: a call goes to the worker with the fewest calls in flight.
    Saved weights go to Ray's object store once per version; a worker loads a version at its
    first call to it."""

    def __init__(self, workers: list, timeout: float):
        self.workers, self.timeout = workers, timeout
        self.in_flight = [0] * len(workers)
        self.versions: OrderedDict[str, object] = OrderedDict()  # version -> ObjectRef
        self.lock = threading.Lock()
        self.waiting = ThreadPoolExecutor(4 * len(workers), thread_name_prefix="rlvr-serve-wait")

    def sample(self, version: str | None, load: Callable[[], dict] | None, *args) -> Future:
        """Sampler.sample's arguments; its result, later."""
        weights = [] if version is None else [self._put(version, load)]
        with self.lock:
            index = int(np.argmin(self.in_flight))
            self.in_flight[index] += 1
        ref = self.workers[index].sample.remote(version, weights, *args)
        future = self.waiting.submit(self._get, ref)
        future.add_done_callback(lambda _: self._finished(index))
        return future

    def _put(self, version: str, load: Callable[[], dict]):
        with self.lock:
            if version in self.versions:
                self.versions.move_to_end(version)
                return self.versions[version]
        ref = ray_module().put(load())
        with self.lock:
            self.versions[version] = ref
            while len(self.versions) > KEPT_VERSIONS:
                self.versions.popitem(last=False)
        return ref

    def _finished(self, index: int) -> None:
        with self.lock:
            self.in_flight[index] -= 1

    def _get(self, ref):
        try:
            return get_within(ref, self.timeout, "a rollout worker did not sample")
        except ray_module().exceptions.RayActorError as error:
            raise WorkerDiedError(
                f"a rollout worker died more than distributed.max_restarts times ({error})"
            ) from None

    def close(self) -> None:
        self.waiting.shutdown(wait=False, cancel_futures=True)


class Cluster:
    """distributed.trainer_ranks - 1 peer trainer ranks beside this process (rank 0), and
    distributed.rollout_workers rollout workers, all Replica actors loading the base from
    `path` (readable on every node); the workers sample with vLLM when `sampling` says how."""

    def __init__(self, d: DistributedConfig, host: AdapterHost, path: str,
                 sampling: VLLMSampling | None = None):  # fmt: skip
        if d.trainer_sharding != "replicate":
            raise ConfigError(
                "rlvr serve replicates LoRA adapters on every trainer rank; "
                f"distributed.trainer_sharding = {d.trainer_sharding!r} is not served (fix: drop it)"
            )
        if d.trainer_ranks > 1 and dist.is_initialized():
            raise ConfigError(
                "this process already belongs to a torch.distributed group: one rlvr serve "
                "with trainer ranks runs per process"
            )
        ray, peers = ray_module(), d.trainer_ranks - 1
        self.started_ray = connect(d, d.rollout_workers + peers)
        remote = ray.remote(Replica)
        options = {"num_cpus": d.worker_cpus, "num_gpus": d.worker_gpus}

        def made(count: int, engine: VLLMSampling | None, **extra) -> list:
            return [
                remote.options(**options, **extra).remote(host.name, path, d.torch_threads, engine)
                for _ in range(count)
            ]

        # a rank that dies loses its optimizer state; a worker holds nothing it cannot reload
        ranks = made(peers, None, max_restarts=0)
        workers = made(d.rollout_workers, sampling, max_restarts=d.max_restarts,
                       max_task_retries=d.max_restarts)  # fmt: skip
        self.trainer = RankedTrainer(host, ranks, d.rollout_timeout) if ranks else host
        self.rollout = RolloutWorkers(workers, d.rollout_timeout)
        try:
            # an actor that cannot load the base says so here, not as a hang in the join
            placed = ray.get([a.where.remote() for a in ranks + workers], timeout=d.rollout_timeout)
            if ranks:
                self._join(host, ranks, d.rollout_timeout)
        except BaseException as error:
            if isinstance(self.trainer, RankedTrainer):
                self.trainer.broken = "the trainer ranks did not start"
            self.close()
            if isinstance(error, ray.exceptions.RayError):
                raise RuntimeError(f"rlvr serve's Ray actors did not start: {error}") from None
            raise
        self.placement = {
            "trainer rank": [where(), *placed[: len(ranks)]],
            "rollout worker": placed[len(ranks) :],
        }

    @staticmethod
    def _join(host: AdapterHost, ranks: list, timeout: float) -> None:
        ray = ray_module()
        init, world = f"tcp://{ray.util.get_node_ip_address()}:{free_port()}", len(ranks) + 1
        joined = [r.join.remote(init, i + 1, world, timeout) for i, r in enumerate(ranks)]
        dist.init_process_group("gloo", init_method=init, rank=0, world_size=world,
                                timeout=timedelta(seconds=timeout))  # fmt: skip
        host.group = dist.group.WORLD
        ray.get(joined, timeout=timeout)

    def describe(self) -> list[str]:
        return [line for kind, p in self.placement.items() for line in placement_lines(kind, p)]

    def close(self) -> None:
        ray = ray_module()
        self.rollout.close()
        trainer = self.trainer
        if isinstance(trainer, RankedTrainer):
            if not trainer.broken:
                ray.get([r.leave.remote() for r in trainer.ranks], timeout=trainer.timeout)
            if dist.is_initialized():  # this service's group: a second one is refused
                dist.destroy_process_group()
            trainer.host.group = None
        for actor in [*getattr(trainer, "ranks", []), *self.rollout.workers]:
            ray.kill(actor)
        if self.started_ray:
            ray.shutdown()
