"""One typed config tree for a run, loaded from TOML/YAML plus dotted command-line overrides.

Every field's description is the documentation: `docs/config.md` is generated from it.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import to_jsonable_python

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


class ConfigError(ValueError):
    """A config problem found before any work starts; the message names the key and the fix."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraSettings(Section):
    """LoRA adapters on the policy (peft): only the adapters train; the base stays frozen."""

    r: int = Field(
        0,
        ge=0,
        description="LoRA rank; 0 trains every weight (full fine-tuning), r > 0 trains only "
        "rank-r adapters on model.lora.target_modules (e.g. 16).",
    )
    alpha: float = Field(
        16.0, gt=0, description="LoRA scaling numerator: adapter outputs are scaled by alpha / r."
    )
    dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the adapters' input during training."
    )
    target_modules: list[str] | str = Field(
        "all-linear",
        description="Layers that get adapters: 'all-linear' (every linear layer but the output "
        "head), a list of module names or name suffixes such as [q_proj, v_proj], or a regular "
        "expression matched against whole module names.",
    )

    @field_validator("target_modules")
    @classmethod
    def _nonempty(cls, value: list[str] | str) -> list[str] | str:
        names = [value] if isinstance(value, str) else value
        if not names or not all(n.strip() for n in names):
            raise ValueError("names no layer (use 'all-linear' or names such as [q_proj, v_proj])")
        return value


class ModelConfig(Section):
    name: str = Field(
        "tiny",
        description="'tiny' for the embedded character-level model, else a Hugging Face hub id "
        "or a local directory holding a causal LM and its tokenizer.",
    )
    preset: str = Field(
        "nano", description="Size preset of the tiny model (see `rlvr list presets`)."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Parameter dtype of the policy (and reference) model."
    )
    device: str = Field(
        "auto",
        description="Torch device for the policy: 'auto' (CUDA when available, else CPU), 'cpu', 'cuda:0', ...",
    )
    trust_remote_code: bool = Field(
        False, description="Allow hub models that ship their own modelling code."
    )
    pretrain_steps: int = Field(
        450,
        gt=0,
        description="Tiny model only: supervised warm-start steps on task demonstrations.",
    )
    pretrain_batch_size: int | None = Field(
        None,
        gt=0,
        description="Tiny model only: warm-start batch size; unset, the task's own (32 for "
        "arithmetic, 64 for the others).",
    )
    pretrain_lr: float = Field(
        2e-3, gt=0, description="Tiny model only: warm-start peak learning rate."
    )
    pretrain_holdout: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Tiny model only: share of a finite task's training rows (a JSONL file's; "
        "at most 256) kept out of the warm start to stop it early: their loss is measured every 25 steps, "
        "and after 4 measurements without a new best the warm start stops with its best "
        "weights, so a small file is not memorised. 0: every row, all pretrain_steps.",
    )
    pretrain_flawed_share: float = Field(
        0.6,
        ge=0,
        le=1,
        description="Tiny model only: share of warm-start demonstrations that make the task's "
        "systematic mistake, so the base is imperfect and RL has work to do. 0 (a clean base) "
        "also recommends train.lr = 3e-5 where neither you nor the task set one.",
    )
    pretrain_hint_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Tiny model only: share of warm-start demonstrations whose prompt carries "
        "a hint, the first k of model.pretrain_hint_segments segments of the reply shown (k "
        "uniform from 1 to all), so the base can read RGPO's hints as a real LLM can "
        "(single-turn tasks).",
    )
    pretrain_hint_segments: int = Field(
        4,
        ge=1,
        description="model.pretrain_hint_share: the segments a warm-start reply is cut into for "
        "its hint (methods.rgpo.segments when both are set).",
    )
    lora: LoraSettings = Field(
        default_factory=LoraSettings,
        description="LoRA adapters (off while lora.r = 0).",
    )


class TaskConfig(BaseModel):
    """Built-in settings plus the task's own parameters (validated against the task's `Params`)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str = Field(
        "arithmetic", description="Task name from `rlvr list tasks`, or `module:Class`."
    )
    eval_size: int = Field(200, gt=0, description="Number of held-out problems used for eval.")
    paraphrase: bool = Field(
        False,
        description="Show every prompt reworded by its task (same problems, same answers): "
        "arithmetic and target_string reword their own, jsonl reads task.paraphrase_field. "
        "Co-RL's diversity knob, the one task key a cohort member may set.",
    )
    rewards: dict[str, float] = Field(
        default_factory=dict,
        description="Reward components and weights, e.g. {numeric = 1.0, format = 0.1}. "
        "Empty means the task's own verifier with weight 1.",
    )
    reward_mode: Literal["sum", "gated"] = Field(
        "sum",
        description="How task.rewards combine: 'sum' (weighted sum) or 'gated' (in the order "
        "given, each component counts only once all earlier ones scored 1.0).",
    )
    reward_params: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Settings of rewards that take them, by reward name, e.g. "
        "{code = {all_or_nothing = true, limits = {wall_seconds = 5}}}; see each reward's keys "
        "in the README.",
    )
    reward_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds a reward may take on one response before it scores 0 with status "
        "'timeout' (a hung reward never stops training).",
    )
    long_prompts: Literal["error", "skip", "truncate"] = Field(
        "error",
        description="File-backed tasks (jsonl): what to do with a prompt that does not fit the "
        "model's context minus rollout.max_new_tokens: 'error' stops before any work naming the "
        "file and line, 'skip' drops the row, 'truncate' cuts the prompt's longest message from "
        "the start (its end, where the question usually is, is kept).",
    )

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


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
    branch_model: str = Field(
        "",
        description="W2SPO: a weaker model (hub id or path, sharing the policy's tokenizer) that "
        "writes branch_tokens tokens into branch_share of the sampled replies at a uniformly "
        "drawn position; the policy continues, and those replies train on the inserted span "
        "alone, weighted by algo.tis's capped pi / pi_weak. Empty: off.",
    )
    branch_tokens: int = Field(8, gt=0, description="W2SPO: tokens in each weak branch.")
    branch_share: float = Field(
        0.5, gt=0, le=1, description="W2SPO: share of sampled replies that get a weak branch."
    )
    replay: str = Field(
        "",
        description="Offline training: a JSONL log of replies ('prompt' and 'response' per row, "
        "e.g. an earlier run's samples.jsonl) that training rollouts are drawn from instead of "
        "sampled; the task's reward rescores them and eval still samples the policy. Every "
        "training prompt must have logged replies (the same task, seed, batch_size and "
        "group_size as the logging run). Empty: off.",
    )
    dispatch_threads: bool = Field(
        False,
        description="Parason: sample every reply with its parallel regions dispatched, one "
        "thread per outline, each blind to its siblings (as in deployment). Each thread after a "
        "region's first trains as its own sequence on the context it was sampled from, with "
        "its episode's advantage (broadcast_from_last); eval dispatches too.",
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
        "with step s's weights while step s trains (one-step-off). Needs algo.tis != 'off': the "
        "decoupled objective weighs each token by pi_proximal / pi_behaviour.",
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


class AlgoConfig(Section):
    advantage: str = Field("grpo", description="Advantage estimator from `rlvr list advantages`.")
    loss: str = Field("ppo_clip", description="Policy loss from `rlvr list losses`.")
    loss_agg: str = Field(
        "token-mean", description="How per-token losses are reduced (`rlvr list aggregations`)."
    )
    seq_mean_count_empty: bool = Field(
        True,
        description="seq-mean-* aggregations: divide by every row of the minibatch, fully masked "
        "ones included (false: only rows with a policy token, as verl does).",
    )
    normalize_std: bool = Field(
        True, description="GRPO: divide group-centred rewards by the group std (False = mean-only)."
    )
    reward_timing: Literal["per_turn", "delayed", "terminal"] = Field(
        "per_turn",
        description="Multi-turn credit: 'per_turn' keeps each turn's reward on that turn, "
        "'delayed' reveals their sum at the end, 'terminal' keeps only the last turn's (outcome).",
    )
    turn_coef: float = Field(
        1.0, ge=0, description="mt_grpo: weight of the turn-level advantage on earlier turns."
    )
    tree_outcome_coef: float = Field(
        0.0,
        ge=0,
        description="tree, prefix_tree: weight of the group-normalised outcome advantage added "
        "to each token's tree credit.",
    )
    tree_dedup_shared: bool = Field(
        True,
        description="tree: scale each token by 1 / (leaves sharing its segment), so a shared "
        "prefix is pushed once in total.",
    )
    clip_low: float = Field(0.2, ge=0, description="PPO ratio clip below 1: ratio >= 1 - clip_low.")
    clip_high: float = Field(
        0.2,
        ge=0,
        description="PPO ratio clip above 1: ratio <= 1 + clip_high (clip-higher when > clip_low).",
    )
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of the KL penalty to the frozen reference; 0 loads no reference model.",
    )
    kl_estimator: str = Field("k3", description="KL estimator from `rlvr list kl`.")
    kl_clamp: float | None = Field(
        None,
        gt=0,
        description="k3 / k3+: clamp each token's k3 value at this (verl clamps at 10); None = no "
        "clamp, so a token far below the reference can weigh e^|log ratio|.",
    )
    kl_in_reward: bool = Field(
        False,
        description="Fold the KL penalty into the per-token reward (REINFORCE++/PPO style) instead of the loss.",
    )
    kl_target: float | None = Field(
        None,
        gt=0,
        description="Adaptive KL: adjust kl_coef so the measured KL tracks this target (None = fixed).",
    )
    kl_horizon: int = Field(
        10000, gt=0, description="Adaptive KL: horizon (in samples) of the proportional controller."
    )
    entropy_coef: float = Field(
        0.0, ge=0, description="Weight of an entropy bonus (subtracted from the loss); 0 disables."
    )
    dual_clip_c: float = Field(
        3.0,
        gt=1,
        description="dual_clip: the loss of a negative-advantage token is at most c * |A|.",
    )
    sapo_tau_pos: float = Field(
        1.0, gt=0, description="sapo: gate temperature for tokens with positive advantage."
    )
    sapo_tau_neg: float = Field(
        1.05, gt=0, description="sapo: gate temperature for tokens with negative advantage."
    )
    gmpo_clip: float = Field(
        0.4, gt=0, description="gmpo: token log-ratios are clipped to [-gmpo_clip, gmpo_clip]."
    )
    dro_beta: float = Field(
        0.1, gt=0, description="dro: weight of the (log pi - log pi_old)^2 / 2 penalty."
    )
    dppo_tv_delta: float = Field(
        0.15,
        gt=0,
        description="dppo_tv: tokens whose probability moved more than this (in the advantage's "
        "direction) get no gradient.",
    )
    dppo_kl_delta: float = Field(
        0.05,
        gt=0,
        description="dppo_kl: tokens whose Bernoulli KL to the old probability exceeds this (in "
        "the advantage's direction) get no gradient.",
    )
    dppo_ratio_cap: float = Field(
        20.0, gt=0, description="dppo_tv / dppo_kl: the stop-gradient ratio weight is at most this."
    )
    kl_cov_ratio: float = Field(
        0.002,
        gt=0,
        le=1,
        description="kl_cov: share of policy tokens (largest covariance of A and log pi) penalised.",
    )
    kl_cov_coef: float = Field(
        1.0, ge=0, description="kl_cov: weight of the |log pi - log pi_old| penalty."
    )
    clip_cov_ratio: float = Field(
        0.0002,
        gt=0,
        le=1,
        description="clip_cov: share of policy tokens whose gradient is dropped.",
    )
    clip_cov_lb: float = Field(
        1.0, description="clip_cov: only tokens with covariance above this are dropped."
    )
    clip_cov_ub: float = Field(
        5.0, description="clip_cov: only tokens with covariance below this are dropped."
    )
    gamma: float = Field(
        1.0, ge=0, le=1, description="gae / reinforce_pp / soft_bellman: discount per token."
    )
    q_beta: float = Field(
        0.1,
        gt=0,
        description="soft_q / soft_bellman: temperature of the soft Q read off the logits, "
        "Q = q_beta (x - x_ref); the weight of the KL to the reference in the objective it solves "
        "(smaller moves the policy further from the reference per unit of reward).",
    )
    lam: float = Field(
        1.0,
        ge=0,
        le=1,
        description="gae: lambda of generalised advantage estimation; soft_bellman: of its soft "
        "lambda-return (0: one-step targets, 1: soft Monte Carlo returns).",
    )
    lam_mode: Literal["fixed", "length_adaptive"] = Field(
        "fixed",
        description="gae: 'fixed' uses lam for advantages and critic targets; 'length_adaptive' "
        "(VAPO / SAO) uses lam = 1 - 1/(lam_alpha * policy tokens of the sequence) for the "
        "advantages and lam = 1 for the critic's targets.",
    )
    lam_alpha: float = Field(
        1.5, gt=0, description="gae, lam_mode=length_adaptive: the alpha of 1 - 1/(alpha * len)."
    )
    whiten_advantages: bool = Field(
        False,
        description="gae: whiten the advantages over the batch's policy tokens, as verl and "
        "TRL's PPO do (the critic's targets stay raw); false keeps them raw.",
    )
    remax_reward_to_go: bool = Field(
        False,
        description="remax: each token gets its reward to go minus the baseline (verl) instead "
        "of the whole sequence's reward (the paper); differs only with per-token rewards.",
    )
    baseline_decay: float = Field(
        0.9,
        ge=0,
        le=1,
        description="running_mean: the baseline b <- decay * b + (1 - decay) * batch mean reward "
        "(the first batch sets b to its mean).",
    )
    dynamic_sampling: bool = Field(
        False,
        description="DAPO: drop groups whose rewards are all equal and sample more prompts until "
        "the batch is full (or max_sampling_rounds is reached).",
    )
    max_sampling_rounds: int = Field(
        3, gt=0, description="dynamic_sampling: most extra sampling rounds per step."
    )
    overlong_window: int = Field(
        0,
        ge=0,
        description="DAPO soft overlong penalty: over the last this many tokens of the budget the "
        "reward falls linearly by up to overlong_factor; 0 disables.",
    )
    overlong_factor: float = Field(1.0, ge=0, description="Size of the full overlong penalty.")
    mask_truncated: bool = Field(
        False,
        description="DAPO: responses cut by max_new_tokens get no loss (their mask is zeroed).",
    )
    parallel_accel_weight: float = Field(
        0.0,
        ge=0,
        description="Parason: a correct rollout whose reply parses as a parallel-thread trace "
        "gains weight * min(acceleration - 1, algo.parallel_accel_cap), acceleration = its "
        "tokens / its critical-path tokens; 0 disables (the paper: 0.5).",
    )
    parallel_accel_cap: float = Field(
        0.2, gt=0, description="Parason: the most acceleration - 1 that earns a bonus."
    )
    parallel_subtask_beta: float = Field(
        0.0, ge=0, description="Parason: weight of the group z-score of the share of tokens in "
        "<Subtask> threads, paid to correct rollouts (the paper sweeps 0.025-0.1).",
    )  # fmt: skip
    parallel_trial_beta: float = Field(
        0.0, ge=0, description="Parason: weight of the group z-score of the share of tokens in "
        "<Trial> threads, paid to correct rollouts.",
    )  # fmt: skip
    parallel_ratio_beta: float = Field(
        0.0, ge=0, description="Parason: weight of the group z-score of the share of tokens in "
        "any thread, paid to correct rollouts.",
    )  # fmt: skip
    parallel_latency_alpha: float = Field(
        0.0, ge=0, description="Parason: weight of the group z-score of the acceleration, paid "
        "to correct rollouts (the paper: 0 or 0.1).",
    )  # fmt: skip
    teacher: str = Field(
        "",
        description="Direct-OPD: a model (directory or hub id, the policy's tokenizer) whose "
        "logprob of each sampled token, minus algo.teacher_ref's, joins that token's reward "
        "(times algo.teacher_coef); '' = none. Without a teacher_ref, the policy's own logprob "
        "is subtracted: on-policy distillation (the negative per-token reverse KL).",
    )
    teacher_ref: str = Field(
        "",
        description="Direct-OPD: the teacher before its RL run, so the reward is the shift RL "
        "made (log pi_teacher - log pi_teacher_ref); '' = distil the teacher itself.",
    )
    teacher_coef: float = Field(
        1.0, gt=0, description="Direct-OPD: weight of the per-token implicit reward."
    )
    teacher_top_k: int = Field(
        0,
        ge=0,
        description="Direct-OPD's Rao-Blackwellised estimator: at every reply position, the "
        "implicit reward's expectation over the policy's k most likely tokens, a loss term "
        "whose gradient is exact over them, instead of the one sampled token's reward (which "
        "then joins no reward); 0 = the sampled token's.",
    )
    teacher_kl_coefs: list[float] = Field(
        default_factory=list,
        description="Direct-OPD: the KL coefficient (to the frozen start, with "
        "algo.kl_estimator) keyed on the sign of the batch's mean implicit reward: [when "
        "below 0, when 0 or above]; [] = algo.kl_coef throughout.",
    )
    domain_teachers: dict[str, str] = Field(
        default_factory=dict,
        description="Multi-teacher on-policy distillation: {domain: teacher (directory or hub "
        "id, the policy's tokenizer)}; each sampled token of a problem of that domain (a mix "
        "task's domain names) gains algo.teacher_coef * (log pi_teacher - log pi_policy); "
        "samples of other domains gain nothing. Instead of algo.teacher.",
    )
    tis: Literal["off", "token", "sequence", "sequence_mask"] = Field(
        "off",
        description="Truncated importance sampling against rollout/training mismatch: weigh each "
        "token (or sequence) by pi_train / pi_engine, capped at tis_cap. sequence_mask (C3PO): "
        "a sequence keeps its ratio inside [1 / tis_cap, tis_cap] and is dropped outside.",
    )
    tis_cap: float = Field(
        2.0,
        gt=1,
        description="Upper bound of the truncated IS weights (sequence_mask: the band is "
        "[1 / tis_cap, tis_cap]).",
    )
    rspo_explorer: bool = Field(
        False,
        description="RSPO: train an explorer copy of the policy on the env's own (process) "
        "rewards, and add its replies, relabelled with the outcome (1 if solved, else 0), to the "
        "main policy's batch, which trains on outcomes only; algo.tis weights those rows by "
        "pi_main / pi_explorer. Logs to <run>/main and <run>/explorer.",
    )
    weight_samples: int = Field(
        0,
        ge=0,
        description="3PO/C3PO: each step draws this many weight samples from a diagonal Gaussian "
        "posterior around the trainable weights (the adapters under model.lora), and each "
        "samples rollout.group_size / weight_samples replies of every group; advantages still "
        "pool the whole group. Needs algo.tis=sequence_mask. 0: off.",
    )
    weight_noise_ess: float = Field(
        1e5,
        gt=0,
        description="3PO: the posterior's effective sample size lambda: sigma = 1 / sqrt(lambda "
        "* (h + weight_noise_floor)), h the optimizer's running mean of squared gradients.",
    )
    weight_noise_floor: float = Field(
        0.1,
        gt=0,
        description="3PO: the posterior's prior precision delta, which sets sigma where the "
        "squared gradients are small (1 / sqrt(lambda * delta) before the first update; 0.01 at "
        "the defaults).",
    )
    critic_lr: float = Field(
        1e-4, gt=0, description="gae: learning rate of the critic (a separate value model)."
    )
    value_clip: float = Field(
        0.2,
        gt=0,
        description="gae: the critic's new values stay within this of the old ones in its loss.",
    )
    value_loss_agg: str = Field(
        "token-mean",
        description="gae: how the critic's per-token value loss is reduced (`rlvr list "
        "aggregations`); 'loss_agg' = the same as algo.loss_agg.",
    )
    critic_warmup_steps: int = Field(
        0, ge=0, description="gae: RL steps at the start that fit only the critic, not the policy."
    )
    critic_updates: int = Field(
        1,
        gt=0,
        description="gae: critic passes (each ppo_epochs x minibatches steps) per policy update; "
        "SAO uses 2.",
    )
    critic_freeze: list[str] = Field(
        default_factory=list,
        description="gae: parameter-name substrings the critic does not train, e.g. ['attn'] "
        "(SAO's frozen-attention critic).",
    )
    dis_clip_low: float = Field(
        0.3, ge=0, description="dis: tokens with ratio <= 1 - dis_clip_low get no gradient."
    )
    dis_clip_high: float = Field(
        5.0, gt=0, description="dis: tokens with ratio >= 1 + dis_clip_high get no gradient."
    )
    pass_k: int = Field(4, gt=0, description="passk: the k whose pass@k the advantages optimise.")
    loss_norm_tokens: int | None = Field(
        None,
        gt=0,
        description="seq-mean-token-sum-norm: constant each sequence's token sum is divided by "
        "(Dr. GRPO); None = rollout.max_new_tokens.",
    )
    ppo_epochs: int = Field(1, gt=0, description="Optimisation passes over each rollout batch.")
    minibatches: int = Field(
        1, gt=0, description="Optimizer steps per epoch; the rollout batch is split evenly."
    )


class MonitorRule(Section):
    """One rule over the metrics stream: when `metric` stays above or below a bound for `steps`
    steps in a row, act."""

    metric: str = Field(
        description="A logged metric, e.g. 'entropy', 'grad_norm', 'eval/accuracy'."
    )
    above: float | None = Field(None, description="Fire when the metric is above this.")
    below: float | None = Field(None, description="Fire when the metric is below this.")
    steps: int = Field(1, gt=0, description="Consecutive steps (that log the metric) it must hold.")
    action: Literal["warn", "stop", "lower_lr"] = Field(
        "warn",
        description="'warn': say so; 'stop': checkpoint and stop (resume continues); "
        "'lower_lr': multiply the learning rate by `factor`.",
    )
    factor: float = Field(0.5, gt=0, lt=1, description="lower_lr: the learning rate's multiplier.")
    name: str = Field("", description="Its name in metrics (monitor/<name>) and messages.")

    @model_validator(mode="after")
    def _one_bound(self) -> MonitorRule:
        if (self.above is None) == (self.below is None):
            raise ValueError(
                f"monitor on '{self.metric}' needs exactly one of above / below; fix: e.g. "
                f'{{metric = "{self.metric}", below = 0.05}}'
            )
        if not self.name:
            side, bound = ("above", self.above) if self.above is not None else ("below", self.below)
            self.name = f"{self.metric}_{side}_{bound:g}"
        return self


class TrainConfig(Section):
    steps: int = Field(20, gt=0, description="RL steps (each: sample a batch, score it, update).")
    lr: float = Field(
        1e-4,
        gt=0,
        description="Peak learning rate of AdamW, tuned for the tiny model; left unset, `rlvr train` "
        "gives a pretrained model 1e-6 (2e-5 with LoRA) and a task its tuned rate (README: "
        "recommended settings).",
    )
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="Learning-rate schedule after warmup."
    )
    warmup_steps: int = Field(0, ge=0, description="Linear warmup, in optimizer steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(
        1.0, gt=0, description="Gradient clipping threshold (global L2 norm)."
    )
    autocast: Literal["off", "bfloat16"] = Field(
        "off",
        description="'bfloat16': the update's and the old/reference logprob passes' matmuls run "
        "under torch.autocast in bf16 (weights, optimizer and logprob math stay float32). Faster "
        "where the hardware has bf16 (GPU, CPU with avx512_bf16 or AMX): see benchmarks/bf16.py.",
    )
    micro_batch_size: int = Field(
        64,
        gt=0,
        description="Sequences per forward/backward; gradients accumulate up to the minibatch.",
    )
    skip_zero_advantage: bool = Field(
        True,
        description="Skip the update's passes over rows whose advantages are all 0 (a group "
        "whose replies all scored alike, under GRPO). Exact: such a row adds nothing to the "
        "gradient when the loss weights each token by its advantage and no KL term in the loss, "
        "entropy bonus or teacher term reads it, and only then is it skipped. `skipped_rows` "
        "logs the share; `entropy` is then over the rows trained.",
    )
    share_prompt: bool = Field(
        True,
        description="Training and old/reference logprob passes run the prompt that a group's "
        "samples share once per micro-batch and reuse its KV cache (with grad) for every sample: "
        "the same logprobs and gradients for less compute (an FSDP2-sharded update runs "
        "without it). false for a model whose forward cannot continue from a cache.",
    )
    seed: int = Field(
        0, description="Global seed: data order, sampling (with step and sample index), init."
    )
    eval_every: int = Field(
        20, ge=0, description="Run held-out eval every this many steps; 0 = only at start and end."
    )
    eval_k: int = Field(
        4,
        gt=0,
        description="Samples per eval problem for pass@k (k = eval_k); 1 skips sampling. Every "
        "eval samples with the same seeds, so pass@k changes only when the model does.",
    )
    save_every: int = Field(
        50, ge=0, description="Write a checkpoint every this many steps; 0 = only at the end."
    )
    max_bad_steps: int = Field(
        3, gt=0, description="Abort after this many consecutive non-finite steps."
    )
    monitors: list[MonitorRule] = Field(
        default_factory=lambda: [
            MonitorRule(metric="entropy", below=0.03, steps=5, name="entropy_collapse"),
            MonitorRule(metric="grad_norm", above=1000.0, steps=2, name="grad_norm_explodes"),
        ],
        description="Rules over the metrics stream, checked after every step (see MonitorRule "
        "in docs/config.md): the default warns when the sampled entropy collapses below 0.03 "
        "for 5 steps and when the gradient norm stays above 1000; [] = none.",
    )


class LogConfig(Section):
    run_dir: str = Field("runs", description="Parent directory of run directories.")
    name: str | None = Field(None, description="Run name; default is '<task>-<timestamp>'.")
    quiet: bool = Field(False, description="Plain log lines instead of a live progress bar.")
    report: bool = Field(
        True,
        description="Write report.png and report.html when the run ends. Their plots take about "
        "2 s, most of a very short run's finish: sweeps of such runs can skip them and write a "
        "page later with `rlvr report RUN`.",
    )
    report_to: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = Field(
        default_factory=list,
        description="Experiment trackers fed every metrics.jsonl record, as TRL's report_to: "
        "'tensorboard' (run_dir/tensorboard), 'wandb' (WANDB_MODE=offline keeps it on disk), "
        "'mlflow' (MLFLOW_TRACKING_URI, else run_dir/mlflow.db), 'trackio' (local); each is an "
        "extra: pip install -e '.[tensorboard]' etc.",
    )
    project: str = Field("rlvr", description="The wandb / trackio project, the MLflow experiment.")
    samples_per_step: int = Field(
        8,
        ge=0,
        description="The first samples of each step's batch (whole groups first) written to "
        "samples.jsonl: prompt, reply, reward, status and advantage; 0 = none.",
    )


class DistributedConfig(Section):
    """Where the work runs: in this process, or on Ray actors (rlvr/distributed/)."""

    backend: Literal["local", "ray"] = Field(
        "local",
        description="'local': everything in this process. 'ray': rollout workers (and trainer "
        "ranks beyond the first) are Ray actors; needs `pip install rlvr[ray]`.",
    )
    address: str | None = Field(
        None,
        description="ray: None starts Ray on this machine; 'auto' or 'ray://HOST:10001' joins "
        "a running cluster (the model path must be readable on every node).",
    )
    rollout_workers: int = Field(
        2, gt=0, description="ray: rollout actors, each with its own copy of the policy and engine."
    )
    trainer_ranks: int = Field(
        1,
        gt=0,
        description="ray: data-parallel ranks of the policy update (gloo on CPU, NCCL on GPU); "
        "rank 0 is this process, the others are Ray actors.",
    )
    trainer_sharding: Literal["replicate", "fsdp"] = Field(
        "replicate",
        description="ray: 'replicate' (DDP): every trainer rank holds the whole policy and "
        "optimizer state. 'fsdp' (FSDP2): each holds 1/trainer_ranks of the weights, gradients "
        "and optimizer state, for a policy whose training state does not fit one device; rank 0 "
        "also keeps the whole weights the rollout and the checkpoints read.",
    )
    placement: Literal["colocated", "disaggregated"] = Field(
        "colocated",
        description="ray: 'colocated' puts rollout worker i and trainer rank i in one placement "
        "bundle (sharing its devices); 'disaggregated' gives rollout and training their own.",
    )
    worker_cpus: float = Field(
        1.0, gt=0, description="ray: CPUs reserved per rollout worker and per trainer rank."
    )
    worker_gpus: float = Field(
        0.0,
        ge=0,
        description="ray: GPUs per rollout worker and trainer rank (a fraction shares a device).",
    )
    torch_threads: int = Field(1, gt=0, description="ray: torch intra-op threads in each actor.")
    rollout_timeout: float = Field(
        600.0,
        gt=0,
        description="ray: seconds a rollout or weight load may take before the run stops with "
        "an error (never a silent hang).",
    )
    max_restarts: int = Field(
        3,
        ge=0,
        description="ray: times a dead actor is restarted; its unfinished rollouts are sampled "
        "again with the same seeds and weights, so nothing is lost or counted twice.",
    )


class CohortConfig(Section):
    members: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Co-RL: train several policies side by side, one per entry, each the run's "
        'config plus that entry\'s dotted overrides (e.g. {"train.seed" = 1}; {} for the run '
        "as written). They share no parameters and answer the same problems each step. Empty: "
        "one ordinary run.",
    )
    reward: Literal["peer", "self", "label"] = Field(
        "peer",
        description="What each member is rewarded for: 'peer' (Co-RL) agreeing with the "
        "majority answer of the member before it in a ring, 'self' (TTRL) with its own "
        "majority, 'label' the task's verifier as usual (the supervised control).",
    )


class DebateConfig(Section):
    rounds: int = Field(
        0,
        ge=0,
        description="MADA-RL: 0 = an ordinary run; n >= 2 = generator and critic roles as two "
        "LoRA adapters on one frozen base. Round 1 the generator samples rollout.group_size "
        "answers a problem; in each later round the critic answers again, shown `shown` answers "
        "of every earlier round. Both roles train; needs model.lora.r > 0 and rollout.engine "
        "= 'hf'.",
    )
    shown: int = Field(
        3, gt=0, description="Answers of each earlier round the critic is shown (<= group_size)."
    )
    show: Literal["answers", "replies"] = Field(
        "answers",
        description="What the critic sees of each shown answer: its final answer as the task's "
        "verifier reads it, or the whole reply.",
    )
    critic: dict[str, Any] = Field(
        default_factory=lambda: {"algo.advantage": "counterfactual"},
        description="The critic role's dotted overrides of the run's config (algo., train.lr, "
        "model.lora., ...). The default trains it with MADA's counterfactual advantage (reward "
        'minus the shown generator answers\' mean reward); {"algo.advantage" = "grpo"} is the '
        "plain-GRPO control.",
    )


def refuse_clashes(settings: dict[str, bool], feature: str, clash: str, off: str) -> None:
    """A ValueError naming every setting in `settings` that is on: `feature` cannot run beside
    them, as each `clash`es with it; the fix turns them off, or the feature (`off`)."""
    if on := [name for name, enabled in settings.items() if enabled]:
        raise ValueError(f"{feature}; {', '.join(on)} {clash}; fix: turn those off (or {off})")


class Config(Section):
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model.")
    task: TaskConfig = Field(
        default_factory=TaskConfig, description="Where problems come from and how they are scored."
    )
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling.")
    algo: AlgoConfig = Field(default_factory=AlgoConfig, description="Advantage, loss and KL.")
    train: TrainConfig = Field(
        default_factory=TrainConfig, description="Optimisation and schedule."
    )
    log: LogConfig = Field(default_factory=LogConfig, description="Run directory and display.")
    distributed: DistributedConfig = Field(
        default_factory=DistributedConfig, description="Ray rollout workers and trainer ranks."
    )
    cohort: CohortConfig = Field(
        default_factory=CohortConfig, description="Several policies trained together (Co-RL)."
    )
    debate: DebateConfig = Field(
        default_factory=DebateConfig,
        description="A generator and a critic on one base, trained together (MADA-RL).",
    )
    methods: dict[str, dict[str, Any] | None] = Field(
        default_factory=dict,
        description="Research methods that act on the loop, each a table of its own settings: "
        "methods.<name>.<key> (`rlvr list methods`; a plug-in by `module:attr`). An empty table "
        "(methods.repexp={}) runs a method with its defaults; methods.<name>=null turns off one "
        "that a file enables.",
    )

    @model_validator(mode="after")
    def _check_combinations(self) -> Config:
        r, a, t = self.rollout, self.algo, self.train
        if self.debate.rounds == 1:
            raise ValueError(
                "debate.rounds = 1 is the generator alone; fix: 0 for an ordinary run, or 2 or "
                "more for a generator and a critic"
            )
        if a.advantage == "counterfactual" and self.debate.rounds < 2:
            raise ValueError(
                "algo.advantage = 'counterfactual' is the baseline of a debate's critic (the "
                "mean reward of the generator answers it was shown); fix: set debate.rounds = 2 "
                "(the critic gets it by default), or use 'remax' for a greedy-rollout baseline"
            )
        if r.batch_size % r.group_size:
            raise ValueError(
                f"rollout.batch_size = {r.batch_size} is not divisible by rollout.group_size = "
                f"{r.group_size}; fix: make batch_size a multiple of group_size, e.g. "
                f"rollout.batch_size={max(1, r.batch_size // r.group_size) * r.group_size}"
            )
        if r.batch_size % a.minibatches:
            raise ValueError(
                f"algo.minibatches = {a.minibatches} does not divide rollout.batch_size = "
                f"{r.batch_size}; fix: choose a divisor of the batch size"
            )
        minibatch = r.batch_size // a.minibatches
        if minibatch % t.micro_batch_size and t.micro_batch_size < minibatch:
            raise ValueError(
                f"train.micro_batch_size = {t.micro_batch_size} does not divide the minibatch of "
                f"{minibatch} sequences (rollout.batch_size / algo.minibatches); fix: choose a divisor"
            )
        if r.max_staleness and self.distributed.backend != "ray":
            raise ValueError(
                f"rollout.max_staleness = {r.max_staleness} samples while the policy trains, "
                "which needs rollout workers of their own; fix: distributed.backend=ray (or "
                "rollout.max_staleness=0)"
            )
        d = self.distributed
        if d.trainer_sharding == "fsdp" and (d.backend != "ray" or d.trainer_ranks < 2):
            raise ValueError(
                "distributed.trainer_sharding = 'fsdp' shards the training state over trainer "
                f"ranks, but this run has {d.trainer_ranks if d.backend == 'ray' else 1}; fix: "
                "distributed.backend=ray and distributed.trainer_ranks=2 or more (or "
                "distributed.trainer_sharding=replicate)"
            )
        if a.weight_samples:
            self._check_weight_samples()
        if a.rspo_explorer and (self.cohort.members or self.debate.rounds or r.replay):
            raise ValueError(
                "algo.rspo_explorer pairs one policy with its explorer; a cohort, a debate or "
                "rollout.replay trains otherwise; fix: turn those off (or algo.rspo_explorer=false)"
            )
        if r.replay:
            self._check_replay()
        if r.max_staleness and a.tis == "off":
            raise ValueError(
                f"rollout.max_staleness = {r.max_staleness} trains on samples of older weights, "
                "which needs the decoupled objective; fix: algo.tis=token (or sequence)"
            )
        if r.branch_model and a.tis == "off":
            raise ValueError(
                "rollout.branch_model writes weak tokens the update trains on, which needs their "
                "importance weights pi / pi_weak; fix: algo.tis=token"
            )
        if r.branch_model and (d.backend == "ray" or r.tree_width or r.partial_tokens):
            raise ValueError(
                "rollout.branch_model branches the replies of the in-process rollout, not of "
                "Ray workers, tree rollouts or partial rollouts; fix: distributed.backend=local, "
                "rollout.tree_width=0 and rollout.partial_tokens=0 (or no rollout.branch_model)"
            )
        if r.dispatch_threads and (
            d.backend == "ray" or r.tree_width or r.branch_model
            or a.teacher or a.domain_teachers or self.debate.rounds >= 2
        ):  # fmt: skip
            raise ValueError(
                "rollout.dispatch_threads runs Parason's threads in the in-process rollout, as "
                "single replies each scored whole; it does not combine with Ray workers, tree "
                "rollouts, W2SPO branches, teachers or a debate. Fix: drop those, or "
                "rollout.dispatch_threads=false"
            )
        if r.partial_tokens and not r.max_staleness:
            raise ValueError(
                "rollout.partial_tokens keeps unfinished groups for a later step, which needs "
                "batches in flight beyond this one; fix: rollout.max_staleness=1 or more (or "
                "rollout.partial_tokens=0)"
            )
        if r.partial_tokens and (r.stop or r.tree_width):
            raise ValueError(
                "rollout.partial_tokens generates in segments, which neither a stop string that "
                "spans two segments nor a tree rollout's branching survives; fix: drop "
                "rollout.stop and rollout.tree_width, or set rollout.partial_tokens=0"
            )
        if a.domain_teachers and a.teacher:
            raise ValueError(
                "algo.domain_teachers distils each domain from its own teacher, and algo.teacher "
                "names one for every sample; fix: keep one of them"
            )
        if (a.teacher_top_k or a.teacher_kl_coefs) and not a.teacher:
            raise ValueError(
                "algo.teacher_top_k and algo.teacher_kl_coefs shape algo.teacher's implicit "
                "reward, but algo.teacher is not set; fix: set it (domain_teachers take neither), "
                "or drop them"
            )
        if a.teacher_kl_coefs and (
            len(a.teacher_kl_coefs) != 2 or min(a.teacher_kl_coefs) < 0 or a.kl_target
        ):
            raise ValueError(
                f"algo.teacher_kl_coefs = {a.teacher_kl_coefs}: it takes two coefficients, [when "
                "the batch's implicit reward is below 0, when at or above], each >= 0, and no "
                "algo.kl_target; fix: e.g. algo.teacher_kl_coefs=[0.0, 0.1]"
            )
        if a.teacher_ref and not a.teacher:
            raise ValueError(
                "algo.teacher_ref is the teacher before its RL run, but algo.teacher is not set; "
                "fix: algo.teacher=<the teacher after RL>, or drop algo.teacher_ref"
            )
        if r.max_staleness and a.dynamic_sampling:
            raise ValueError(
                "rollout.max_staleness > 0 samples future steps' prompts ahead, which "
                "algo.dynamic_sampling's extra rounds would reorder; fix: turn one of them off"
            )
        return self

    def _check_replay(self) -> None:
        """Logged replies carry no sampling logprobs and come from one log, in this process."""
        r, a = self.rollout, self.algo
        others = {
            f"algo.tis={a.tis}": a.tis != "off",
            "algo.loss=dis": a.loss == "dis",
            "algo.kl_in_reward": a.kl_in_reward and a.kl_coef > 0,
            "algo.teacher": bool(a.teacher),
            "distributed.backend=ray": self.distributed.backend == "ray",
            "rollout.tree_width": bool(r.tree_width),
            "rollout.branch_model": bool(r.branch_model),
            "rollout.dispatch_threads": r.dispatch_threads,
            "rollout.partial_tokens": bool(r.partial_tokens),
            "algo.weight_samples": bool(a.weight_samples),
            "algo.dynamic_sampling": bool(a.dynamic_sampling),
            "debate.rounds": bool(self.debate.rounds),
            "cohort.members": bool(self.cohort.members),
        }
        refuse_clashes(
            others,
            "rollout.replay trains on logged single-turn replies, whose sampling logprobs are "
            "unknown, in this process",
            "needs them sampled live or weighted by them",
            "rollout.replay=''",
        )

    def _check_weight_samples(self) -> None:
        """3PO samples every reply of the in-process rollout from a weight draw of the policy's
        own parameters, and trains on them through the sequence-level IS mask."""
        r, a = self.rollout, self.algo
        if r.group_size % a.weight_samples:
            raise ValueError(
                f"algo.weight_samples = {a.weight_samples} splits each group's replies evenly "
                f"over its weight draws, but rollout.group_size = {r.group_size} is not a "
                "multiple of it; fix: choose a divisor of the group size"
            )
        if a.tis != "sequence_mask":
            raise ValueError(
                "algo.weight_samples trains on replies sampled from perturbed weights, which "
                "needs C3PO's sequence-level importance mask; fix: algo.tis=sequence_mask"
            )
        others = {
            "distributed.backend=ray": self.distributed.backend == "ray",
            "rollout.engine=vllm": r.engine != "hf",
            "rollout.tree_width": bool(r.tree_width),
            "rollout.branch_model": bool(r.branch_model),
            "rollout.dispatch_threads": r.dispatch_threads,
            "debate.rounds": bool(self.debate.rounds),
            "cohort.members": bool(self.cohort.members),
        }
        refuse_clashes(
            others,
            "algo.weight_samples perturbs the weights the in-process engine samples with, one "
            "policy at a time",
            "samples otherwise",
            "algo.weight_samples=0",
        )

    def hash(self) -> str:
        """Hash of what determines the run's numbers (not where it logs)."""
        import hashlib

        data = self.model_dump(
            mode="json",
            exclude={
                "log": True,
                "train": {"steps"},
                "distributed": {"address", "rollout_timeout", "max_restarts"},
            },
        )
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# --- loading -------------------------------------------------------------------------------


def _known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += _known_keys(ann, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def suggest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


def _field_type(key: str) -> Any:
    model: Any = Config
    annotation = None
    for part in key.split("."):
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return None
        annotation = fields[part].annotation
        model = annotation
    return annotation


def _default(key: str) -> Any:
    """The default of a leaf key such as 'rollout.max_new_tokens' or 'model.lora.r', else None."""
    model: Any = Config
    sub = None
    for part in key.split("."):
        sub = getattr(model, "model_fields", {}).get(part)
        if sub is None:
            return None
        model = sub.annotation
    if sub is None or sub.is_required() or isinstance(model, type) and issubclass(model, BaseModel):
        return None
    return sub.default_factory() if sub.default_factory else sub.default


def _parse_value(key: str, text: str) -> Any:
    """Command-line values are YAML scalars/lists (0.02, true, [add, mul], {numeric: 1.0}),
    except for text fields, which keep what was typed (log.name=2024 stays a string, and
    algo.tis=off the word, not YAML's false)."""
    kind = _field_type(key)
    words = get_origin(kind) is Literal and all(isinstance(a, str) for a in get_args(kind))
    if kind in (str, str | None) or words:
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def set_dotted(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{key}': '{part}' is a value, not a section.")
        node = child
    node[parts[-1]] = value


def read_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"config file {path} does not exist; fix: check the path (examples/ holds ready configs)."
        )
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(
            f"config file {path} line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
            f"{column}); fix: save the file as UTF-8, e.g. from Latin-1 with "
            f"`iconv -f latin1 -t utf-8 {path} > {path.with_stem(path.stem + '.utf8')}`"
        ) from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(
                f"config file {path}: unknown extension; fix: use .toml, .yaml or .yml."
            )
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"config file {path} is not valid {path.suffix[1:].upper()}: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections (model, task, ...).")
    return data


# Keys that moved to a method's own table: a config that still uses one is told where it went.
RENAMED = {
    "algo.elliptical_beta": "methods.repexp.beta",
    "algo.elliptical_dim": "methods.repexp.dim",
    "algo.elliptical_lambda": "methods.repexp.ridge_lambda",
    "algo.elliptical_leave_one_out": "methods.repexp.leave_one_out",
    "algo.repetition_penalty_delta": "methods.river.penalty_delta",
    "algo.repetition_jaccard": "methods.river.jaccard",
    "algo.repetition_cap": "methods.river.penalty_cap",
    "task.filter": "methods.river.filter",
    "task.filter_pool": "methods.river.pool",
    "task.filter_oracle": "methods.river.oracle",
    "task.filter_k": "methods.river.k",
    "algo.rfpo_label_steps": "methods.rfpo.label_steps",
    "algo.rfpo_label_share": "methods.rfpo.label_share",
    "algo.rfpo_calibration_rollouts": "methods.rfpo.calibration_rollouts",
    "algo.rgpo_segments": "methods.rgpo.segments",
    "algo.rgpo_sft_coef": "methods.rgpo.sft_coef",
    **{
        f"algo.poise_{k}": f"methods.poise.{k}"
        for k in (
            "layer",
            "bootstrap_steps",
            "buffer",
            "ridge_alpha",
            "prompt_dims",
            "response_dims",
        )
    },  # fmt: skip
}


def _explain(error: ValidationError, data: dict[str, Any]) -> str:
    lines = []
    known = _known_keys(Config)
    for err in error.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(
                f"unknown key '{key}'.{suggest(key, known)} (see docs/config.md for every key)"
            )
            continue
        value: Any = data
        for part in err["loc"]:
            if isinstance(value, dict):
                value = value.get(part)
            elif isinstance(value, list) and isinstance(part, int) and part < len(value):
                value = value[part]
            else:
                value = None
        msg = err["msg"].removeprefix("Value error, ")
        if not key:
            lines.append(msg)
            continue
        default = _default(key)
        fix = f"; fix: e.g. the default, {key}={json.dumps(default)}" if default is not None else ""
        lines.append(f"{key} = {value!r}: {msg}{fix}")
    return "invalid config:\n  " + "\n  ".join(lines)


def _moved(data: dict[str, Any]) -> None:
    """A ConfigError naming each key of `data` that moved, and where to."""
    found = [
        key
        for key in RENAMED
        if isinstance(data.get(key.split(".")[0]), dict)
        and key.split(".")[1] in data[key.split(".")[0]]
    ]
    if found:
        raise ConfigError(
            "invalid config:\n  "
            + "\n  ".join(
                f"'{k}' moved to '{RENAMED[k]}' (the method's own table); fix: write "
                f"{RENAMED[k]} instead"
                for k in found
            )
        )


def build_config(data: dict[str, Any]) -> Config:
    _moved(data)
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_explain(e, data)) from None


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    base: dict[str, Any] | None = None,
) -> Config:
    """Read a TOML/YAML file (or start from `base`, else defaults) and apply `section.key=value` overrides."""
    data = read_file(path) if path else dict(base or {})
    known = _known_keys(Config)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"override '{item}' has no '='; fix: write section.key=value, e.g. train.steps=50."
            )
        key, text = item.split("=", 1)
        key = key.strip()
        if "." not in key:
            raise ConfigError(
                f"override '{item}': keys are dotted (section.key).{suggest(key, known)}"
            )
        set_dotted(data, key, _parse_value(key, text))
    return build_config(data)


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def _param_rows(prefix: str, model: type[BaseModel]) -> list[str]:
    """Table rows of a Params model; nested models are flattened to dotted keys."""
    rows = []
    for name, sub in model.model_fields.items():
        if isinstance(sub.annotation, type) and issubclass(sub.annotation, BaseModel):
            rows += _param_rows(f"{prefix}.{name}", sub.annotation)
            continue
        default = sub.default_factory() if sub.default_factory else sub.default
        shown = "required" if sub.is_required() else f"`{json.dumps(to_jsonable_python(default))}`"
        rows.append(f"| `{prefix}.{name}` | {shown} | {sub.description} |")
        item = get_args(sub.annotation)[0] if get_origin(sub.annotation) is list else None
        if isinstance(item, type) and issubclass(item, BaseModel):  # a list of rules: their keys
            rows += _param_rows(f"{prefix}.{name}[]", item)
    return rows


def _table(title: str, rows: list[str]) -> list[str]:
    return [title, "", "| key | default | description |", "|---|---|---|", *rows, ""]


def config_reference(
    tasks: dict[str, Any], rewards: dict[str, Any], methods: dict[str, Any]
) -> str:
    """Markdown table of every key, its default and its description (docs/config.md); the
    `Params` models of `tasks`, of reward classes in `rewards` and of `methods` add their own
    keys."""
    lines = [
        "# Config reference",
        "",
        "Generated from `rlvr/config.py` by `python -m rlvr.config > docs/config.md`; a test keeps it current.",
        "Set keys in a TOML/YAML file or on the command line as `section.key=value`.",
        "",
    ]
    for section, field in Config.model_fields.items():
        if section == "methods":  # a table per method, each from its own Params
            lines += [f"## `methods`: {field.description}", ""]
            for name, method in sorted(methods.items()):
                summary = " ".join(method.__doc__.split())
                rows = _param_rows(f"methods.{name}", method.Params)
                lines += _table(f"### `methods.{name}`: {summary}", rows)
            continue
        lines += _table(
            f"## `{section}`: {field.description}", _param_rows(section, field.annotation)
        )
        if section != "task":
            continue
        for name, task_cls in sorted(tasks.items()):
            title = f'### `task.name = "{name}"`: {task_cls.__doc__}'
            lines += _table(title, _param_rows("task", task_cls.Params))
        for name, reward in sorted(rewards.items()):
            if isinstance(reward, type) and hasattr(reward, "Params"):
                summary = reward.__doc__.strip().splitlines()[0]
                title = f"### `task.reward_params.{name}`: {summary}"
                lines += _table(title, _param_rows(f"task.reward_params.{name}", reward.Params))
    return "\n".join(lines)


if __name__ == "__main__":
    from rlvr.methods import METHODS
    from rlvr.rewards import REWARDS
    from rlvr.tasks import TASKS

    print(config_reference(TASKS, REWARDS, METHODS))
