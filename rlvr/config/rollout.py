"""The `rollout` section: how replies are sampled (engine, budgets, trees, branches,
replay, asynchrony), with the vLLM engine's own settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section


class VLLMSettings(Section):
    """How the vLLM engine runs (rollout.engine='vllm'); colocated in the trainer's process."""

    gpu_memory_utilization: float = Field(
        0.4,
        gt=0,
        le=1,
        description="GPU only: share of GPU memory vLLM takes for weights and KV cache; the "
        "rest is left to training, which shares the GPU.",
    )
    kv_cache_gib: float = Field(
        1.0, gt=0, description="CPU only: GiB of memory for vLLM's KV cache."
    )
    sleep_mode: bool = Field(
        True,
        description="GPU only: free the KV cache and offload vLLM's weights while the policy "
        "updates, so training gets the GPU's memory back.",
    )
    enforce_eager: bool = Field(
        False,
        description="Skip graph capture and compilation: a faster start, slower decoding.",
    )
    lora_sync: Literal["adapter", "merged"] = Field(
        "adapter",
        description="With model.lora: send vLLM the adapter alone, which it applies while "
        "decoding (a sync moves megabytes, not the whole model), or the merged full weights "
        "(no decoding overhead).",
    )
    sync_timeout: float = Field(
        300.0,
        gt=0,
        description="Seconds a weight sync may take before the run stops with an error "
        "(instead of hanging, or sampling from stale weights).",
    )


class RolloutConfig(Section):
    engine: str = Field(
        "hf",
        description="What samples rollouts, a name from `rlvr list engines`: 'hf' (the embedded "
        "engine, decoding with the training model itself) or 'vllm' (needs `pip install "
        "rlvr[vllm]`; gets the policy's weights after every update); or `module:attr`, a "
        "builder (cfg, model, tokenizer, model_path) -> Engine.",
    )
    vllm: VLLMSettings = Field(default_factory=VLLMSettings, description="vLLM engine settings.")
    batch_size: int = Field(
        128, gt=0, description="Completions sampled per RL step (prompts per step x group_size)."
    )
    group_size: int = Field(8, gt=0, description="Completions sampled per prompt.")
    max_new_tokens: int = Field(
        48, gt=0, description="Generation budget per completion, in tokens."
    )
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature (training logprobs use it too)."
    )
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Nucleus sampling: keep the smallest set of tokens with this mass.",
    )
    top_k: int = Field(0, ge=0, description="Keep only the k most likely tokens; 0 disables.")
    stop: list[str] = Field(default_factory=list, description="Extra stop strings besides EOS.")
    max_batch_size: int = Field(
        256,
        gt=0,
        description="Most sequences the engine decodes at once; larger calls are split (bounds "
        "memory), and each part's rewards are computed while the next part generates.",
    )
    max_turns: int = Field(
        16,
        gt=0,
        description="Most policy turns per episode (multi-turn envs usually end sooner; "
        "single-turn tasks take one).",
    )
    max_total_tokens: int = Field(
        0,
        ge=0,
        description="Most tokens in a whole episode, prompt and observations included; the "
        "episode ends when the next turn would not fit. 0: no cap beyond max_new_tokens per turn.",
    )
    tree_width: int = Field(
        0,
        ge=0,
        description="Tree rollouts (rlvr/rollout/tree.py): children per branch point, >= 2; "
        "0 samples independent episodes. Pair with algo.advantage='tree'.",
    )
    tree_depth: int = Field(
        2,
        gt=0,
        description="Most branch points on a root-to-leaf path, root included; a full tree "
        "has tree_width ** tree_depth leaves (group_size leaves are kept per prompt).",
    )
    tree_branch_at: Literal["auto", "turn", "token"] = Field(
        "auto",
        description="Where trees branch: at turn boundaries, at a token inside a reply, or "
        "'auto' (turns when the env is multi-turn).",
    )
    tree_branch_score: Literal["logprob", "entropy"] = Field(
        "logprob",
        description="Token branching picks the least likely sampled token ('logprob') or the "
        "highest-entropy position ('entropy', one extra forward pass).",
    )
    tree_min_segment_tokens: int = Field(
        4, gt=0, description="Token branching keeps at least this many tokens on each side."
    )
    replay: str = Field(
        "",
        description="Offline training: a JSONL log of replies ('prompt' and 'response' per row, "
        "e.g. an earlier run's samples.jsonl) that training rollouts are drawn from instead of "
        "sampled; the task's reward rescores them and eval still samples the policy. Every "
        "training prompt must have logged replies (the same task, seed, batch_size and "
        "group_size as the logging run). Empty: off.",
    )
    reward_workers: int = Field(
        16,
        gt=0,
        description="Threads that score responses in parallel (sandboxed code, reward models, "
        "judges); 1 scores them one by one.",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description="Asynchronous RL (needs distributed.backend='ray'): rollout runs up to this "
        "many policy versions ahead of training. 0 is the synchronous loop; 1 samples step s+1 "
        "with step s's weights while step s trains (one-step-off). Needs algo.tis != 'off' (the "
        "decoupled objective weighs each token by pi_proximal / pi_behaviour) or algo.loss = "
        "'dis', whose ratio is to pi_behaviour already.",
    )
    partial_tokens: int = Field(
        0,
        ge=0,
        description="Partial rollouts (needs rollout.max_staleness >= 1): Ray workers generate in "
        "segments of this many tokens and take the newest weights between segments, so a "
        "generation in flight at a weight sync continues under the new weights. The batches "
        "sampled ahead are the over-provisioned prompts: a step trains the oldest groups to "
        "finish, and slow groups carry over to a later step. 0: every episode is sampled whole "
        "by one version.",
    )
