"""The `algo` section: advantage estimator, policy loss, KL, and the knobs the loop, the critic
or several algorithms read; an estimator's or a loss's own knobs are its `Params`, set under
algo.advantage_params / algo.loss_params (rlvr/algos/)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlvr.config.base import Section


class AlgoConfig(Section):
    advantage: str = Field("grpo", description="Advantage estimator from `rlvr list advantages`.")
    loss: str = Field("ppo_clip", description="Policy loss from `rlvr list losses`.")
    advantage_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings of the chosen algo.advantage, e.g. {k = 8} for passk or "
        '{lam_mode = "length_adaptive"} for gae: each estimator\'s keys, defaults and bounds '
        "are in docs/config.md under `algo.advantage_params (advantage = ...)`; an estimator "
        "without settings refuses any.",
    )
    loss_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings of the chosen algo.loss, e.g. {tau_pos = 1.0, tau_neg = 1.05} for "
        "sapo: each loss's keys, defaults and bounds are in docs/config.md under "
        "`algo.loss_params (loss = ...)`; a loss without settings refuses any.",
    )
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
    gamma: float = Field(
        1.0, ge=0, le=1, description="gae / reinforce_pp / soft_bellman: discount per token."
    )
    lam: float = Field(
        1.0,
        ge=0,
        le=1,
        description="gae: lambda of generalised advantage estimation; soft_bellman: of its soft "
        "lambda-return (0: one-step targets, 1: soft Monte Carlo returns).",
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
