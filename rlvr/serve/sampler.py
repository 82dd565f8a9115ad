"""Sampling for Tinker sampling clients: saved adapter weights (or the bare base) through rlvr's
HF engine or vLLM, with each token's logprob and, when asked, the prompt's; in this process, or
on the rollout workers of serve/cluster.py."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlvr.config import VLLMSettings
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.engine import sample_seed
from rlvr.serve.adapters import AdapterHost
from rlvr.serve.wire import Datum


@dataclass
class VLLMSampling:
    """rlvr serve --engine vllm: vLLM's settings, the LoRA rank it reserves room for, and its
    seed; each process that samples builds its own engine from these."""

    settings: VLLMSettings
    max_lora_rank: int = 64
    seed: int = 0

    def engine(self, path: str, model, tokenizer):
        """A VLLMEngine on the base at `path` (`model` is the same base, loaded for HF)."""
        from rlvr.rollout.hf_engine import eos_ids
        from rlvr.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(path, tokenizer, eos_ids(model, tokenizer), self.settings,
                          seed=self.seed, lora_rank=self.max_lora_rank)  # fmt: skip


class Sampler:
    """Sampler snapshots as extra adapters on the host, one per saved path, made on first use;
    the least recently used goes once `keep` are loaded (an RL loop saves one every step).

    With a VLLMEngine on the same base, vLLM samples: each snapshot is also written as a peft
    adapter directory for it, and the host scores prompts. Without, rlvr's HF engine samples
    on the host's model."""

    def __init__(self, host: AdapterHost, keep: int = 4, engine=None):
        self.host, self.keep, self.engine = host, keep, engine
        self.snapshots: OrderedDict[str, str] = OrderedDict()  # weights version -> adapter name
        self.made = 0
        self.files = Path(tempfile.mkdtemp(prefix="rlvr-serve-adapters-")) if engine else None
        if self.files is not None:
            weakref.finalize(self, shutil.rmtree, self.files, True)

    def snapshot(self, version: str, load: Callable[[], dict]) -> str:
        """The adapter holding the weights of `version`; `load` reads them if not loaded."""
        if version in self.snapshots:
            self.snapshots.move_to_end(version)
            return self.snapshots[version]
        state = load()
        if self.engine is not None and state["lora"]["rank"] > self.engine.max_lora_rank:
            raise ValueError(
                f"LoRA rank {state['lora']['rank']} is above the {self.engine.max_lora_rank} the "
                "vLLM engine reserved; start rlvr serve with a larger --max-lora-rank"
            )
        while len(self.snapshots) >= self.keep:
            self._drop(self.snapshots.popitem(last=False)[1])
        name = f"sampler{self.made}"
        self.made += 1
        self.host.load(name, state, optimizer=False)
        if self.files is not None:  # peft writes an adapter other than "default" to files/name
            self.host.model.save_pretrained(str(self.files), selected_adapters=[name])
        self.snapshots[version] = name
        return name

    def _drop(self, name: str) -> None:
        self.host.remove(name)
        if self.files is not None:
            shutil.rmtree(self.files / name, ignore_errors=True)

    def _engine(self, adapter: str | None, model):
        if self.engine is None:
            return HFEngine(model, self.host.tokenizer)
        self.engine.use_adapter(None if adapter is None else str(self.files / adapter))
        return self.engine

    def sample(
        self,
        version: str | None,
        load: Callable[[], dict],
        prompt: list[int],
        n: int,
        params: dict,
        prompt_logprobs: bool,
        seeds: list[int],
    ) -> tuple[list[dict], list[float] | None]:
        """n sequences after `prompt` from the weights of `version` (None: the base), drawn with
        `seeds` (dicts of tokens, logprobs, stop_reason) and, if asked, the prompt tokens'
        logprobs (NaN for the first, which has no context)."""
        adapter = None if version is None else self.snapshot(version, load)
        host, max_tokens = self.host, params.get("max_tokens") or 16
        host.check_prompt(prompt, max_tokens)
        stop = params.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        stop_strings = tuple(s for s in stop if isinstance(s, str))
        stop_tokens = {s for s in stop if isinstance(s, int)}
        settings = SamplingParams(
            max_new_tokens=max_tokens, temperature=params.get("temperature", 1.0),
            top_p=params.get("top_p", 1.0), top_k=max(params.get("top_k", -1), 0),
            stop=stop_strings,
        )  # fmt: skip
        with host.active(adapter) as model:
            replies = self._engine(adapter, model).generate([prompt] * n, settings, seeds=seeds)
            scored = self._prompt_logprobs(adapter, prompt) if prompt_logprobs else None
        return [_sequence(c, stop_tokens) for c in replies], scored

    def _prompt_logprobs(self, adapter: str | None, prompt: list[int]) -> list[float]:
        tokens = np.asarray(prompt[:-1], dtype=np.int64)
        datum = Datum(tokens, {"target_tokens": np.asarray(prompt[1:], dtype=np.int64)})
        if not len(tokens):
            return [float("nan")]
        (logprobs,), _ = self.host.forward_backward(adapter, [datum], None, {}, backward=False)
        return [float("nan"), *logprobs.tolist()]


def sample_seeds(params: dict, n: int, seed: int, call: int) -> list[int]:
    """Seed s gives samples s, s+1, ...; without one, the service's seed and the call's number
    pick a fresh stream, so the same call samples alike wherever it runs."""
    if params.get("seed") is not None:
        return [sample_seed(params["seed"], i) for i in range(n)]
    return [sample_seed(seed, call, i) for i in range(n)]


class InProcessRollout:
    """Samples on the service's own model, on its worker thread (the model is shared with the
    training clients, so one call at a time)."""

    def __init__(self, host: AdapterHost, worker: Executor, engine=None):
        self.sampler, self.worker = Sampler(host, engine=engine), worker

    def sample(self, *args) -> Future:
        """Sampler.sample's arguments; its result, later."""
        return self.worker.submit(self.sampler.sample, *args)


def _sequence(completion, stop_tokens: set[int]) -> dict:
    """Tinker's sequence: cut after the first stop token; "stop" unless it ran out of tokens."""
    tokens, logprobs = completion.token_ids, completion.logprobs
    reason = "length" if completion.finish_reason == "length" else "stop"
    for i, token in enumerate(tokens):
        if token in stop_tokens:
            tokens, logprobs, reason = tokens[: i + 1], logprobs[: i + 1], "stop"
            break
    return {"tokens": tokens, "logprobs": logprobs, "stop_reason": reason}
