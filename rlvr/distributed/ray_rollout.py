"""Rollout workers as Ray actors: each holds a copy of the policy and its engine, samples its
share of every batch, and loads the weights of the version each request names."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import Config, DistributedConfig
from rlvr.models.loading import load_model, resolve_device
from rlvr.models.lora import apply_lora, trainable_state_dict
from rlvr.rollout.engine import SamplingParams
from rlvr.types import Problem, Trajectory

INSTALL = "pip install -c constraints.txt 'rlvr[ray]'"


class RolloutTimeoutError(RuntimeError):
    """Rollout workers did not answer within distributed.rollout_timeout."""


class WorkerDiedError(RuntimeError):
    """A rollout worker died, and Ray did not (or could not) run its request again."""


class WorkerRestartingError(WorkerDiedError):
    """A rollout worker is being restarted by Ray and refused a request meanwhile."""


def ray_module():
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"distributed.backend = 'ray' needs Ray. Fix: {INSTALL}, or distributed.backend=local."
        ) from None
    return ray


def connect(d: DistributedConfig, actors: int) -> bool:
    """Join distributed.address, or start Ray here with room for `actors` actors (Ray's CPUs are
    logical, so this fits a small machine); True if this call started Ray."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    if d.address:
        ray.init(address=d.address, log_to_driver=False)
    else:
        cpus = max(os.cpu_count() or 1, int(np.ceil(actors * d.worker_cpus)))
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    return True


def get_within(refs, timeout: float, what: str):
    """ray.get(refs), or RolloutTimeoutError saying `what` did not happen within `timeout` s
    (distributed.rollout_timeout): never a silent hang."""
    ray = ray_module()
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise RolloutTimeoutError(
            f"{what} within distributed.rollout_timeout = {timeout:g} s; see "
            "/tmp/ray/session_latest/logs"
        ) from None


def where() -> dict:
    """This actor's node, process and devices: logged so a user sees what ran where."""
    ray = ray_module()
    context = ray.get_runtime_context()
    return {
        "node": ray.util.get_node_ip_address(),
        "pid": os.getpid(),
        "gpus": [str(g) for g in context.get_accelerator_ids().get("GPU", [])],
    }


def placement_lines(kind: str, placement: list[dict]) -> list[str]:
    """One log line per actor of `kind`: where() of each, in order."""
    return [
        f"{kind} {i}: node {p['node']} pid {p['pid']}"
        + (f" gpus {','.join(p['gpus'])}" if p["gpus"] else "")
        for i, p in enumerate(placement)
    ]


class RolloutWorker:
    """One actor's policy copy, engine and runners (made remote by RayRollout)."""

    def __init__(self, cfg: Config, tokenizer: PreTrainedTokenizerBase, model_path: str):
        from rlvr.rollout.build import build_engine, make_runner
        from rlvr.train.components import build_components

        torch.set_num_threads(cfg.distributed.torch_threads)
        components = build_components(cfg)
        m = cfg.model
        model, self.tokenizer = load_model(model_path, m.dtype, m.trust_remote_code, tokenizer)
        if m.lora.r > 0:
            model = apply_lora(model, m.lora)
        self.model = model.to(resolve_device(m.device)).eval()
        engine = build_engine(cfg, self.model, self.tokenizer, model_path)
        self.engine = engine
        self.runners = {
            trees: make_runner(cfg, self.model, self.tokenizer, components, trees, engine)
            for trees in (True, False)
        }
        self.version: int | None = None

    def collect(
        self,
        problems: Sequence[Problem],
        group_size: int,
        seed: Sequence[int],
        first_group: int,
        params: SamplingParams | None,
        trees: bool,
        weights: list,  # [ObjectRef]: wrapped, so Ray fetches it only when the version is new
        version: int,
    ) -> tuple[list[Trajectory], dict[str, float], dict[str, float], int]:
        start = time.perf_counter()
        loading = self.load(weights, version)
        runner = self.runners[trees]
        trajectories = runner.collect(problems, group_size, seed, params, first_group=first_group)
        for trajectory in trajectories:
            trajectory.stamp(version)
        timings = dict(runner.timings, weight_load=loading)
        timings["busy"] = time.perf_counter() - start
        return trajectories, timings, dict(runner.stats), os.getpid()

    def load(self, weights: list, version: int) -> float:
        """Take the weights of `version` unless they are loaded already; seconds it took."""
        if version == self.version:
            return 0.0
        start = time.perf_counter()
        self.model.load_state_dict(ray_module().get(weights[0]), strict=False)
        self.engine.load_weights(self.model)
        self.version = version
        return time.perf_counter() - start

    def where(self) -> dict:
        return where()


class RayRollout:
    """Splits each batch over `distributed.rollout_workers` actors by whole groups (sample i is
    seeded as in one process, so the split does not change what is sampled); keeps submitted
    batches until collected, which is what lets rollout run ahead of training."""

    worker_class: type = RolloutWorker
    worker_remote: dict = {}  # the worker class's own ray.remote options
    task_retries = True  # Ray runs a dead worker's requests again on its replacement

    def __init__(self, cfg: Config, tokenizer: PreTrainedTokenizerBase, model_path: str,
                 params: SamplingParams):  # fmt: skip
        ray, d = ray_module(), cfg.distributed
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ranks = d.trainer_ranks - 1  # rank 0 is the driver
        self.started_ray = connect(d, d.rollout_workers + ranks)
        self.cfg, self.params, self.timeout = cfg, params, d.rollout_timeout
        bundle = {"CPU": d.worker_cpus} | ({"GPU": d.worker_gpus} if d.worker_gpus else {})
        colocated = d.placement == "colocated"
        bundles = max(d.rollout_workers, ranks) if colocated else d.rollout_workers + ranks
        self.group = placement_group([bundle] * bundles, strategy="PACK")
        ray.get(self.group.ready(), timeout=self.timeout)
        share = 0.5 if colocated and ranks else 1.0  # a colocated bundle holds two actors

        def strategy(index: int):
            return PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index)

        self.actor_options = {
            "num_cpus": d.worker_cpus * share,
            "num_gpus": d.worker_gpus * share,
            "max_restarts": d.max_restarts,
            "max_task_retries": d.max_restarts if self.task_retries else 0,
        }
        self.trainer_bundles = [
            strategy(i if colocated else d.rollout_workers + i) for i in range(ranks)
        ]
        remote = ray.remote(**self.worker_remote) if self.worker_remote else ray.remote
        remote = remote(self.worker_class)
        self.workers = [
            remote.options(**self.actor_options, scheduling_strategy=strategy(i)).remote(
                cfg, tokenizer, model_path
            )
            for i in range(d.rollout_workers)
        ]
        self.placement = self._get([w.where.remote() for w in self.workers], "start")
        self.pids = {p["pid"] for p in self.placement}  # a restarted worker brings a new one
        self.pending: dict[tuple, list] = {}  # submitted batches' result refs, per worker
        self.finished: dict[tuple, list] = {}  # results fetched early (in_flight, restore)
        self.weights, self.version = None, 0
        self.timings: dict[str, float] = {}
        self.stats: dict[str, float] = {}
        self.busy, self.waited, self.loads = 0.0, 0.0, 0.0
        self.since = time.perf_counter()
        self.evaluator = _Evaluator(self)

    # --- weights -------------------------------------------------------------------------

    def sync(self, model: PreTrainedModel, version: int) -> None:
        """Publish the weights once in Ray's object store; each worker loads them at its next
        request that names this version (requests run in order, so none samples mixed weights)."""
        ray = ray_module()
        state = {k: v.detach().to("cpu", copy=True) for k, v in trainable_state_dict(model).items()}
        self.weights, self.version = ray.put(state), version

    def release_memory(self) -> None:
        return None  # the workers hold their own memory, apart from the trainer's

    # --- batches -------------------------------------------------------------------------

    def submit(self, problems, group_size, seed) -> None:
        key = (tuple(seed), group_size)
        if key not in self.pending and key not in self.finished:
            self.pending[key] = self._request(problems, group_size, seed, None, True)

    def collect(self, problems, group_size, seed) -> list[Trajectory]:
        self.submit(problems, group_size, seed)
        key = (tuple(seed), group_size)
        return self._merge(self.finished.pop(key, None) or self._fetch(key))

    def _fetch(self, key: tuple) -> list:
        """Wait for a submitted batch's results, one per worker."""
        return self._wait(self.pending.pop(key))

    def run(self, problems, group_size, seed, params, trees) -> list[Trajectory]:
        """Sample now, outside the training schedule (evaluation, greedy baselines)."""
        return self._merge(self._wait(self._request(problems, group_size, seed, params, trees)))

    def _shares(self, count: int) -> list[tuple[int, int, int]]:
        """(worker index, first, end): each worker's contiguous share of `count` groups."""
        sizes = [len(s) for s in np.array_split(range(count), len(self.workers))]
        starts = np.cumsum([0, *sizes]).tolist()
        return [(i, a, b) for i, (a, b) in enumerate(zip(starts[:-1], starts[1:])) if b > a]

    def _request(self, problems, group_size, seed, params, trees) -> list:
        return [
            self.workers[i].collect.remote(
                list(problems[a:b]),
                group_size,
                tuple(seed),
                a,
                params,
                trees,
                [self.weights],
                self.version,
            )
            for i, a, b in self._shares(len(problems))
        ]

    def _wait(self, refs: list) -> list:
        start = time.perf_counter()
        results = self._get(refs, "sample")
        self.waited += time.perf_counter() - start
        return results

    def _get(self, refs: list, doing: str) -> list:
        ray = ray_module()
        try:
            return ray.get(refs, timeout=self.timeout)
        except ray.exceptions.GetTimeoutError:
            raise RolloutTimeoutError(
                f"rollout workers did not {doing} within distributed.rollout_timeout = "
                f"{self.timeout:g} s. Fix: raise it for long generations, or see the workers' logs "
                "under /tmp/ray/session_latest/logs for what they are stuck on."
            ) from None
        except ray.exceptions.ActorUnavailableError as e:
            raise WorkerRestartingError(f"a rollout worker is restarting ({e})") from None
        except ray.exceptions.RayActorError as e:
            raise WorkerDiedError(
                f"a rollout worker died more than distributed.max_restarts = "
                f"{self.cfg.distributed.max_restarts} times ({e}). Fix: look for the cause (out of "
                "memory?) in /tmp/ray/session_latest/logs, then resume from the last checkpoint."
            ) from None

    def _merge(self, results: list) -> list[Trajectory]:
        trajectories = [t for part, _, _, _ in results for t in part]
        timings = [t for _, t, _, _ in results]
        self.pids.update(pid for _, _, _, pid in results)
        # the workers ran side by side: a phase took as long as its slowest worker
        self.timings = {name: max(t[name] for t in timings) for name in ("generate", "env")}
        self.stats = {}
        for _, _, stats, _ in results:
            for name, value in stats.items():
                self.stats[name] = self.stats.get(name, 0.0) + value
        self.busy += sum(t["busy"] for t in timings)
        self.loads = max(self.loads, max(t["weight_load"] for t in timings))
        return trajectories

    # --- bookkeeping ---------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """Idle ratios since the last call: the trainer's share of time spent waiting for
        samples, and the workers' share of time with nothing to sample (verl's async names)."""
        elapsed = max(time.perf_counter() - self.since, 1e-9)
        out = {
            "trainer/idle_ratio": min(self.waited / elapsed, 1.0),
            "rollouter/idle_ratio": max(1.0 - self.busy / (elapsed * len(self.workers)), 0.0),
            "time/weight_load": self.loads,
            "time/rollout_wait": self.waited,
            "rollout/worker_restarts": len(self.pids) - len(self.workers),
        }
        self.busy, self.waited, self.loads, self.since = 0.0, 0.0, 0.0, time.perf_counter()
        return out

    def describe(self) -> list[str]:
        return placement_lines("rollout worker", self.placement)

    def in_flight(self) -> dict:
        for key in list(self.pending):
            self.finished[key] = self._fetch(key)
        return dict(self.finished)

    def restore(self, in_flight: dict) -> None:
        self.finished.update(in_flight)

    def close(self) -> None:
        ray = ray_module()
        from ray.util.placement_group import remove_placement_group

        for worker in self.workers:
            ray.kill(worker)
        remove_placement_group(self.group)
        if self.started_ray:
            ray.shutdown()


class _Evaluator:
    """The workers as a Runner that samples independently (never trees), from the newest weights."""

    def __init__(self, rollout: RayRollout):
        self.rollout, self.params = rollout, rollout.params

    def collect(self, problems, group_size, seed, params=None) -> list[Trajectory]:
        return self.rollout.run(problems, group_size, seed, params, trees=False)
