"""Partial rollouts on Ray (rollout.partial_tokens): each worker keeps a pool of episodes that
generate in segments and take the newest published weights between segments; a step takes the
oldest groups to finish, so a generation in flight at a weight sync continues under new weights."""

from __future__ import annotations

import os
import time

from transformers import PreTrainedModel

from rlvr.distributed.ray_rollout import (
    RayRollout,
    RolloutTimeoutError,
    RolloutWorker,
    WorkerDiedError,
    WorkerRestartingError,
)
from rlvr.types import Trajectory


class PartialWorker(RolloutWorker):
    """A rollout worker whose sampling runner is a PartialRunner. `admit` and `publish` run on
    the actor's "control" thread, so batches and weights reach the pool while `advance` runs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pool = self.runners[True]
        self.latest: tuple[list, int] | None = None  # the newest weights published

    def admit(self, problems, group_size, seed, group_ids) -> None:
        self.pool.admit(problems, group_size, seed, group_ids)

    def publish(self, weights: list, version: int) -> None:
        if self.latest is None or version > self.latest[1]:
            self.latest = (weights, version)

    def advance(self, need: int, weights: list, version: int):
        """`need` finished groups from the pool, oldest batch first, as flat trajectories."""
        start = time.perf_counter()
        self.publish(weights, version)
        loading = [0.0]

        def newest() -> int:
            loading[0] += self.load(*self.latest)
            return self.version

        groups = self.pool.advance(need, newest)
        unfinished = self.pool.unfinished_lengths()
        stats = {"unfinished": len(unfinished), "unfinished_tokens": sum(unfinished)}
        timings = dict(self.pool.timings, weight_load=loading[0])
        timings["busy"] = time.perf_counter() - start
        return [t for group in groups for t in group], timings, stats, os.getpid()


class PartialRayRollout(RayRollout):
    """RayRollout over PartialWorkers. A batch joins the workers' pools when it is submitted;
    its request asks each worker for as many finished groups as its share, from any batch.

    A worker's pool dies with it, so Ray must not rerun its requests blindly: the driver keeps
    every group admitted and not yet returned (`backlog`), and when a request fails it admits
    those again on the restarted worker and asks once more; no group is returned twice."""

    worker_class = PartialWorker
    worker_remote = {"concurrency_groups": {"control": 1}}
    task_retries = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # per worker: batch seed -> (problems, group_size, group ids) admitted, not returned
        self.backlog: list[dict[tuple, tuple]] = [{} for _ in self.workers]
        self.needs: dict[tuple, list[tuple[int, int]]] = {}  # key -> (worker, groups) per ref

    def sync(self, model: PreTrainedModel, version: int) -> None:
        super().sync(model, version)
        for worker in self.workers:
            worker.publish.options(concurrency_group="control").remote([self.weights], version)

    def submit(self, problems, group_size, seed) -> None:
        key = (tuple(seed), group_size)
        if key in self.pending or key in self.finished:
            return
        refs, needs = [], []
        for i, a, b in self._shares(len(problems)):
            share = (list(problems[a:b]), group_size, list(range(a, b)))
            self.backlog[i][tuple(seed)] = share
            self._admit(i, tuple(seed), share)
            refs.append(self.workers[i].advance.remote(b - a, [self.weights], self.version))
            needs.append((i, b - a))
        self.pending[key], self.needs[key] = refs, needs

    def _admit(self, worker: int, seed: tuple, share: tuple) -> None:
        problems, group_size, group_ids = share
        self.workers[worker].admit.options(concurrency_group="control").remote(
            problems, group_size, seed, group_ids
        )

    def _fetch(self, key: tuple) -> list:
        return [self._served(i, need, ref) for (i, need), ref in
                zip(self.needs.pop(key), self.pending.pop(key))]  # fmt: skip

    def _served(self, worker: int, need: int, ref) -> tuple:
        for _ in range(self.cfg.distributed.max_restarts):
            try:
                result = self._wait([ref])[0]
                break
            except WorkerDiedError:  # Ray restarts it with an empty pool: fill it again
                self._until_restarted(worker)
                for seed, share in self.backlog[worker].items():
                    self._admit(worker, seed, share)
                ref = self.workers[worker].advance.remote(need, [self.weights], self.version)
        else:
            result = self._wait([ref])[0]  # out of restarts: this raises, or it is served
        returned = {(tuple(t.info["admitted"]), t.group_id) for t in result[0]}
        backlog = self.backlog[worker]
        for seed, (problems, group_size, ids) in list(backlog.items()):
            kept = [(p, g) for p, g in zip(problems, ids) if (seed, g) not in returned]
            backlog[seed] = ([p for p, _ in kept], group_size, [g for _, g in kept])
            if not kept:
                del backlog[seed]
        return result

    def _until_restarted(self, worker: int) -> None:
        """Wait until the restarted worker answers: what reaches it while Ray restarts it is
        refused, and a refused admission would leave a group out of its pool."""
        deadline = time.perf_counter() + self.timeout
        while True:
            try:
                self._get([self.workers[worker].where.remote()], "restart")
                return
            except WorkerRestartingError:
                if time.perf_counter() > deadline:
                    raise RolloutTimeoutError(
                        f"rollout worker {worker} did not come back within "
                        f"distributed.rollout_timeout = {self.timeout:g} s"
                    ) from None
                time.sleep(0.1)

    def collect(self, problems, group_size, seed) -> list[Trajectory]:
        trajectories = super().collect(problems, group_size, seed)
        self.stats = partial_metrics(trajectories, tuple(seed), self.stats)
        groups: dict[tuple, int] = {}  # carried-over groups come from several batches
        for t in trajectories:
            t.group_id = groups.setdefault((tuple(t.info["admitted"]), t.group_id), len(groups))
        return trajectories


def partial_metrics(trajectories: list[Trajectory], batch: tuple, stats: dict) -> dict:
    """What finishing first does to a batch: the shares of samples carried over from earlier
    batches (the slow ones) and taken early from later batches (the quick ones), and the length
    and accuracy of each against the samples of this batch, since a batch that takes whatever
    finished first leans shorter and easier than what was sampled."""
    out = {k: v for k, v in stats.items() if k not in ("unfinished", "unfinished_tokens")}
    admitted = [tuple(t.info["admitted"]) for t in trajectories]
    parts = {
        "carried": [t for t, a in zip(trajectories, admitted) if a < batch],
        "on_time": [t for t, a in zip(trajectories, admitted) if a == batch],
        "early": [t for t, a in zip(trajectories, admitted) if a > batch],
    }
    for name, part in parts.items():
        if name != "on_time":
            out[f"{name}_share"] = len(part) / len(trajectories)
        if part:
            out[f"length_{name}"] = sum(t.num_generated for t in part) / len(part)
            out[f"accuracy_{name}"] = sum(t.correct for t in part) / len(part)
    out["unfinished"] = stats.get("unfinished", 0.0)
    out["unfinished_length"] = stats.get("unfinished_tokens", 0.0) / max(out["unfinished"], 1)
    return out
