"""The `algo` section: advantage estimator, policy loss, KL, and the knobs of each
algorithm that reads them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section


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
