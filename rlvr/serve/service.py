"""The state behind `rlvr serve`: sessions, training and sampling clients, checkpoints on disk,
and the futures the Tinker SDK polls. Training runs on one worker thread, in each training
client's request order (the SDK's seq_id); sampling runs there too, or on Ray's rollout workers."""

from __future__ import annotations

import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from rlvr.serve.adapters import AdapterHost, save
from rlvr.serve.sampler import InProcessRollout, sample_seeds
from rlvr.serve.wire import ForwardBackward, write_forward_backward, write_sample

# results already handed out, kept so that a poll whose answer was lost can ask again; the
# oldest go first (results not yet handed out are all kept)
KEPT_DELIVERED = 256
PATH = re.compile(
    r"tinker://(?P<model>[\w:-]+)/(?P<kind>weights|sampler_weights)/(?P<name>[\w.-]+)"
)


def model_id(session_id: str, model_seq_id: int) -> str:
    """A training client's id, derived as the SDK derives it (it names clients it loads itself)."""
    return f"{session_id}:train:{model_seq_id}"


class UserError(ValueError):
    """A request the service refuses; its message names the problem and the fix."""


@dataclass
class Turns:
    """A training client's requests, run in seq_id order however they arrive."""

    next_seq: int = 1
    waiting: dict[int, Callable[[], None]] = field(default_factory=dict)


class Service:
    """`host` is the base and its training clients in this process. A `cluster` (serve/cluster.py)
    adds Ray's trainer ranks beside it and samples on Ray's rollout workers; None: all here,
    sampling with `engine` (a VLLMEngine) or, None, rlvr's HF engine."""

    def __init__(self, host: AdapterHost, state_dir: Path, tokenizer_id: str, seed: int = 0,
                 cluster=None, engine=None):  # fmt: skip
        self.host, self.cluster = host, cluster
        self.state_dir, self.tokenizer_id = Path(state_dir), tokenizer_id
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="rlvr-serve")
        self.trainer = host if cluster is None else cluster.trainer
        self.rollout = cluster.rollout if cluster else InProcessRollout(host, self.worker, engine)
        self.seed, self.calls = seed, 0
        self.results: dict[str, Future] = {}
        self.delivered: OrderedDict[str, Future] = OrderedDict()
        self.turns: dict[str, Turns] = {}
        self.sampling_sessions: dict[str, str | None] = {}  # id -> weights path (None: base)
        self.lock = threading.Lock()

    # ---- futures ----

    def submit(self, job: Callable[[], object], model_id: str | None = None, seq_id=None) -> dict:
        """Queue `job`; its result is polled by request id. With a model and seq_id it waits for
        that client's earlier requests."""
        request_id, future = self._pending()

        def start() -> None:
            self.worker.submit(_run, job, future)

        if model_id is None or seq_id is None:
            start()
        else:
            self._in_turn(model_id, seq_id, start)
        return {"request_id": request_id}

    def track(self, started: Future, convert: Callable[[object], object]) -> dict:
        """Like submit, for work already started elsewhere: its result, converted, is polled."""
        request_id, future = self._pending()
        started.add_done_callback(partial(_converted, future, convert))
        return {"request_id": request_id}

    def _pending(self) -> tuple[str, Future]:
        request_id, future = uuid.uuid4().hex, Future()
        with self.lock:
            self.results[request_id] = future
        return request_id, future

    def _in_turn(self, model_id: str, seq_id: int, start: Callable[[], None]) -> None:
        with self.lock:
            turns = self.turns.setdefault(model_id, Turns())
            if seq_id < turns.next_seq:  # a retry or an out-of-band call: no wait
                start()
                return
            turns.waiting[seq_id] = start
            while turns.next_seq in turns.waiting:
                turns.waiting.pop(turns.next_seq)()
                turns.next_seq += 1

    def result(self, request_id: str) -> Future:
        with self.lock:
            future = self.results.get(request_id) or self.delivered.get(request_id)
            if future is None:
                raise UserError(f"no request {request_id!r} (handed out long ago, or never made)")
            return future

    def handed_out(self, request_id: str) -> None:
        """The result reached its caller: it leaves the pending set for the bounded recent one."""
        with self.lock:
            if request_id in self.results:
                self.delivered[request_id] = self.results.pop(request_id)
                while len(self.delivered) > KEPT_DELIVERED:
                    self.delivered.popitem(last=False)

    # ---- checkpoints ----

    def _file(self, path: str) -> Path:
        match = PATH.fullmatch(path)
        if match is None:
            raise UserError(
                f"{path!r} is not a checkpoint path of this service; they read "
                "tinker://<model_id>/weights/<name> or tinker://<model_id>/sampler_weights/<name>"
            )
        return self.state_dir / match["model"] / match["kind"] / f"{match['name']}.pt"

    def read(self, path: str) -> dict:
        return torch.load(self._existing(path), weights_only=False)

    def _existing(self, path: str) -> Path:
        file = self._file(path)
        if not file.exists():
            raise UserError(f"no checkpoint {path!r} in {self.state_dir}")
        return file

    def _save(self, model_id: str, kind: str, name: str | None, optimizer: bool) -> str:
        name = name or f"step-{uuid.uuid4().hex[:8]}"
        path = f"tinker://{model_id}/{kind}/{name}"
        save(self.trainer.state(model_id, optimizer), self._file(path))
        return path

    # ---- jobs: each runs on the worker thread ----

    def check_base(self, base_model: str | None) -> None:
        if base_model is not None and base_model != self.host.name:
            raise UserError(f"base_model {base_model!r} is not served here; this service serves "
                            f"{self.host.name!r} (start `rlvr serve --model {base_model}`)")  # fmt: skip

    def create_model(self, model_id: str, base_model: str, lora: dict) -> dict:
        self.check_base(base_model)
        self.trainer.add(model_id, lora)
        return {"model_id": model_id, "type": "create_model"}

    def forward_backward(self, request: ForwardBackward) -> bytes:
        name = self.host.get(request.model_id).name
        logprobs, metrics = self.trainer.forward_backward(
            name, request.data, request.loss_fn or None, request.config, not request.forward_only
        )
        return write_forward_backward({"logprobs": logprobs}, metrics)

    def optim_step(self, model_id: str, adam: dict) -> dict:
        return {"metrics": self.trainer.optim_step(model_id, adam), "type": "optim_step"}

    def save_weights(self, model_id: str, name: str | None) -> dict:
        return {"path": self._save(model_id, "weights", name, True), "type": "save_weights"}

    def save_for_sampler(self, model_id: str, name: str | None) -> dict:
        path = self._save(model_id, "sampler_weights", name, False)
        reply = {"path": path, "type": "save_weights_for_sampler"}
        if name is None:  # an unnamed save opens a sampling session on it
            session = f"sampling-{uuid.uuid4().hex[:12]}"
            self.sampling_sessions[session] = path
            reply["sampling_session_id"] = session
        return reply

    def load_weights(self, model_id: str, path: str, optimizer: bool, base: str | None) -> dict:
        self.check_base(base)
        self.trainer.load(model_id, self.read(path), optimizer)
        return {"path": path, "model_id": model_id, "type": "load_weights"}

    # ---- sampling: not a training client's turn, as it reads saved weights only ----

    def sample(
        self, weights: str | None, prompt: list[int], n: int, params: dict, scored: bool
    ) -> dict:
        """Start sampling from the weights saved at `weights` (None: the base); its request id."""
        try:
            self.host.check_prompt(prompt, params.get("max_tokens") or 16)
        except ValueError as error:
            raise UserError(str(error)) from None
        version, load = None, None
        if weights is not None:
            # loaded once per version: a save over the same name changes the file's mtime
            version = f"{weights}@{self._existing(weights).stat().st_mtime_ns}"
            load = partial(self.read, weights)
        with self.lock:
            self.calls += 1
            seeds = sample_seeds(params, n, self.seed, self.calls)
        started = self.rollout.sample(version, load, prompt, n, params, scored, seeds)
        return self.track(started, lambda result: write_sample(*result))

    def close(self) -> None:
        """Stop taking work: the worker thread, and Ray's actors if there are any."""
        self.worker.shutdown(wait=True)
        if self.cluster is not None:
            self.cluster.close()


def _run(job: Callable[[], object], future: Future) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(job())
    except BaseException as error:  # noqa: BLE001 -- every failure goes back to the caller
        future.set_exception(error)


def _converted(future: Future, convert: Callable[[object], object], started: Future) -> None:
    _run(lambda: convert(started.result()), future)
