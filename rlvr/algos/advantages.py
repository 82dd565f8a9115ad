"""Advantage estimators: fn(AdvInputs, AlgoConfig) -> advantages [B, T], zero off the loss mask.

Estimators that compare completions of one prompt set `fn.min_group_size`; those that need an
optional AdvInputs field list it in `fn.requires` (the trainer checks both before a run). An
estimator with settings of its own declares them as `fn.Params` (a FnParams model) and takes
them as the keyword `params`: the run's algo.advantage_params, validated and bound before any
work (rlvr/train/components.py), so the loop still calls fn(inputs, algo).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import Field

from rlvr.config import AlgoConfig
from rlvr.registry import FnParams

EPS = 1e-6  # added to every std we divide by, so all-equal groups give 0, not 0/0
OTB_EPS = 1e-8  # added to otb's sum of weights, as in the paper's code


@dataclass
class AdvInputs:
    rewards: torch.Tensor  # [B] sequence reward (already including any in-reward KL)
    group_ids: torch.Tensor  # [B] long; trajectories of one prompt share an id
    loss_mask: torch.Tensor  # [B, T] 1 on policy tokens
    token_rewards: torch.Tensor | None = None  # [B, T]; None = reward on the last policy token
    values: torch.Tensor | None = None  # [B, T] critic values, aligned like loss_mask (gae)
    # [B] a reward baseline from outside the group: a greedy rollout's (remax), or the mean of the
    # generator answers a debate's critic was shown (counterfactual)
    baseline_rewards: torch.Tensor | None = None
    turn_rewards: torch.Tensor | None = None  # [B, K] each turn's reward; NaN past the last turn
    turn_ids: torch.Tensor | None = None  # [B, T] long: the turn of each policy token, -1 elsewhere
    # tree rollouts (rlvr.rollout.tree.segment_tensors): per policy token, its segment's node
    # value minus its parent's, and 1 / the number of rows sharing that segment
    segment_advantages: torch.Tensor | None = None  # [B, T]
    segment_weights: torch.Tensor | None = None  # [B, T]
    reward_mean: torch.Tensor | None = None  # [] mean reward of earlier steps (running_mean)
    # otb: the pre-update policy's logprobs of the sampled tokens and sum_v pi_v^2 of each
    # position's predictive distribution, from one forward pass
    old_logprobs: torch.Tensor | None = None  # [B, T]
    sum_pi_squared: torch.Tensor | None = None  # [B, T]
    reward_components: torch.Tensor | None = None  # [B, K] each named reward's own value (gdpo)
    reward_weights: torch.Tensor | None = None  # [K] their weights; None = all 1
    # poise: each rollout's predicted success rate g(z_i) from the hidden-state probe
    probe_predictions: torch.Tensor | None = None  # [B]
    # prefix_tree: the token each column predicts (Batch.input_ids[:, 1:]), -1 past a row's end
    target_ids: torch.Tensor | None = None  # [B, T] long
    # soft_bellman: logsumexp of each position's logits under the pre-update policy and the
    # reference, and the reference's logprobs of the sampled tokens (with old_logprobs, the
    # logits of the sampled tokens up to a shared temperature), from which it reads Q and V
    old_normaliser: torch.Tensor | None = None  # [B, T]
    ref_normaliser: torch.Tensor | None = None  # [B, T]
    ref_logprobs: torch.Tensor | None = None  # [B, T]


AdvantageFn = Callable[[AdvInputs, AlgoConfig], torch.Tensor]


# ---- the settings of the estimators that take any (algo.advantage_params) ----


class MtGrpoParams(FnParams):
    turn_coef: float = Field(
        1.0, ge=0, description="Weight of the turn-level advantage on earlier turns."
    )


class PrefixTreeParams(FnParams):
    outcome_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of the group-normalised outcome advantage added to each token's tree "
        "credit.",
    )


class TreeParams(PrefixTreeParams):
    dedup_shared: bool = Field(
        True,
        description="Scale each token by 1 / (leaves sharing its segment), so a shared prefix is "
        "pushed once in total.",
    )


class RemaxParams(FnParams):
    reward_to_go: bool = Field(
        False,
        description="Each token gets its reward to go minus the baseline (verl) instead of the "
        "whole sequence's reward (the paper); differs only with per-token rewards.",
    )


class GaeParams(FnParams):
    lam_mode: Literal["fixed", "length_adaptive"] = Field(
        "fixed",
        description="'fixed' uses algo.lam for advantages and critic targets; 'length_adaptive' "
        "(VAPO / SAO) uses lam = 1 - 1/(lam_alpha * policy tokens of the sequence) for the "
        "advantages and lam = 1 for the critic's targets.",
    )
    lam_alpha: float = Field(
        1.5, gt=0, description="lam_mode = length_adaptive: the alpha of 1 - 1/(alpha * len)."
    )
    whiten_advantages: bool = Field(
        False,
        description="Whiten the advantages over the batch's policy tokens, as verl and TRL's PPO "
        "do (the critic's targets stay raw); false keeps them raw.",
    )


class PassKParams(FnParams):
    k: int = Field(
        4, gt=0, description="The k whose pass@k the advantages optimise (needs group_size > k)."
    )


class SoftQParams(FnParams):
    """Shared by the estimator soft_bellman and the loss soft_q, which must agree on beta."""

    beta: float = Field(
        0.1,
        gt=0,
        description="Temperature of the soft Q read off the logits, Q = beta (x - x_ref); the "
        "weight of the KL to the reference in the objective it solves (smaller moves the policy "
        "further from the reference per unit of reward). soft_bellman's and soft_q's must be "
        "equal.",
    )


def group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element mean and unbiased std of its group. values, group_ids: [B]."""
    _, index, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    sums = values.new_zeros(len(counts)).index_add_(0, index, values)
    means = sums / counts
    sq = values.new_zeros(len(counts)).index_add_(0, index, (values - means[index]) ** 2)
    stds = (sq / (counts - 1).clamp(min=1)).sqrt()
    return means[index], stds[index]


def token_rewards_or_outcome(inputs: AdvInputs) -> torch.Tensor:
    """Per-token rewards [B, T]: inputs.token_rewards, else each reward on its last policy token."""
    if inputs.token_rewards is not None:
        return inputs.token_rewards
    mask = inputs.loss_mask.bool()
    last = last_policy_token(mask)
    rows = torch.nonzero(mask.any(dim=1)).squeeze(1)  # fully masked rows get no reward
    out = torch.zeros(mask.shape, dtype=inputs.rewards.dtype, device=mask.device)
    out[rows, last[rows]] = inputs.rewards[rows]
    return out


def last_policy_token(mask: torch.Tensor) -> torch.Tensor:
    """[B]: the index of each row's last policy token (0 for a row without one)."""
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return (mask.bool() * positions).argmax(dim=1)


def at_last_policy_token(x: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """[B]: x [B, T] on each row's last policy token, 0 for a row without one."""
    mask = loss_mask.bool()
    picked = x.gather(1, last_policy_token(mask)[:, None]).squeeze(1)
    return torch.where(mask.any(dim=1), picked, 0.0)


def _reward_to_go(inputs: AdvInputs) -> torch.Tensor:
    """float64 [B, T]: the sum of the policy tokens' rewards from each token on (undiscounted)."""
    mask = inputs.loss_mask.bool()
    rewards = torch.where(mask, token_rewards_or_outcome(inputs).double(), 0.0)
    return rewards.flip(-1).cumsum(-1).flip(-1)


def _broadcast(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sequence advantages [B] -> float32 [B, T], the same value on every policy token."""
    return torch.where(mask.bool(), adv.float()[:, None], 0.0)


def broadcast_from_last(
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    episodes: torch.Tensor,
    row_mask: torch.Tensor,
) -> torch.Tensor:
    """Parason's broadcast_from_last: every extra row of an episode (a thread trained as its own
    sequence) takes, on each of its policy tokens, the advantage the episode's row holds on its
    last policy token (0 where that row has none). advantages, loss_mask [B, T] of the episodes;
    episodes [R], the episode row of each extra row; row_mask [R, T'] -> [R, T'] float32."""
    value = at_last_policy_token(advantages, loss_mask).float()
    return torch.where(row_mask.bool(), value[episodes][:, None], 0.0)


def _whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(x - mean) / std over all policy tokens of the batch (unbiased std), zero off the mask."""
    mask = mask.bool()
    picked = x[mask]
    if picked.numel() == 0:
        return torch.zeros_like(x)
    std = picked.std() if picked.numel() > 1 else x.new_zeros(())
    return torch.where(mask, (x - picked.mean()) / (std + EPS), 0.0)


def _require(inputs: AdvInputs, field: str, estimator: str, source: str) -> torch.Tensor:
    value = getattr(inputs, field)
    if value is None:
        raise ValueError(f"advantage '{estimator}' needs AdvInputs.{field}, which {source}.")
    return value


def grpo(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """GRPO: reward minus its group mean, divided by the group std unless normalize_std=False."""
    mean, std = group_stats(inputs.rewards.double(), inputs.group_ids)
    adv = inputs.rewards.double() - mean
    if algo.normalize_std:
        adv = adv / (std + EPS)
    return _broadcast(adv, inputs.loss_mask)


def _group_normalised(values: torch.Tensor, group_ids: torch.Tensor, std: bool) -> torch.Tensor:
    mean, spread = group_stats(values, group_ids)
    return (values - mean) / (spread + EPS) if std else values - mean


def mt_grpo(inputs: AdvInputs, algo: AlgoConfig, *, params: MtGrpoParams) -> torch.Tensor:
    """MT-GRPO (Wei et al. 2025): tokens of an earlier turn k get A_outcome + turn_coef * A_k,
    tokens of the last turn get A_outcome; outcome = the last turn's reward, and each is
    group-normalised like GRPO among the samples of the group that have that turn."""
    source = "the trainer fills from each episode's per-turn rewards"
    turn_rewards = _require(inputs, "turn_rewards", "mt_grpo", source).double()
    turn_ids = _require(inputs, "turn_ids", "mt_grpo", source)
    turns = (~turn_rewards.isnan()).sum(dim=1)  # [B]
    rows = torch.arange(len(turns), device=turns.device)
    outcome = turn_rewards[rows, (turns - 1).clamp(min=0)]
    adv = _group_normalised(outcome, inputs.group_ids, algo.normalize_std)[:, None].expand(
        turn_ids.shape
    )
    for k in range(turn_rewards.shape[1] - 1):
        earlier = turns > k + 1  # samples for which turn k is not the last
        if not earlier.any():
            break
        a_k = torch.zeros_like(outcome)
        a_k[earlier] = _group_normalised(
            turn_rewards[earlier, k], inputs.group_ids[earlier], algo.normalize_std
        )
        adv = adv + torch.where(turn_ids == k, params.turn_coef * a_k[:, None], 0.0)
    return torch.where(inputs.loss_mask.bool(), adv, 0.0).float()


def dr_grpo(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """Dr. GRPO: reward minus its group mean, no std division (pair with seq-mean-token-sum-norm)."""
    mean, _ = group_stats(inputs.rewards.double(), inputs.group_ids)
    return _broadcast(inputs.rewards.double() - mean, inputs.loss_mask)


def rloo(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """RLOO: reward minus the mean reward of the other completions of the same prompt."""
    rewards = inputs.rewards.double()
    mean, _ = group_stats(rewards, inputs.group_ids)
    _, index, counts = torch.unique(inputs.group_ids, return_inverse=True, return_counts=True)
    n = counts[index].double()
    # r_i - (n*mean - r_i)/(n-1) == n/(n-1) * (r_i - mean); a group of one has no others: 0
    return _broadcast(n / (n - 1).clamp(min=1) * (rewards - mean), inputs.loss_mask)


def sibling_mean(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """[B]: the mean of `values` over the *other* members of each row's group (0 for a group of
    one, which has no others). values, group_ids: [B]."""
    _, index, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    sums = values.new_zeros(len(counts)).index_add_(0, index, values)
    return (sums[index] - values) / (counts[index] - 1).clamp(min=1)


def poise(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """POISE (arXiv 2605.07579): reward minus the mean probe prediction of the *other* rollouts.

    b_i = mean_{j != i} g(z_j), so the baseline never sees rollout i's own features and the
    policy gradient stays unbiased; with predictions = rewards this is exactly rloo (the
    trainer's bootstrap). A group of one gets 0."""
    source = "methods.poise fills from its hidden-state probe (rlvr/methods/poise.py)"
    predictions = _require(inputs, "probe_predictions", "poise", source).double()
    rewards = inputs.rewards.double()
    _, index, counts = torch.unique(inputs.group_ids, return_inverse=True, return_counts=True)
    adv = torch.where(counts[index] > 1, rewards - sibling_mean(predictions, inputs.group_ids), 0.0)
    return _broadcast(adv, inputs.loss_mask)


def gpg(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """GPG (arXiv:2504.02546): alpha (r - group mean), alpha = batch size / non-zero rewards.

    The fewer samples score, the larger alpha: a batch of rare successes still pushes at full
    strength."""
    rewards = inputs.rewards.double()
    mean, _ = group_stats(rewards, inputs.group_ids)
    alpha = len(rewards) / max(int((rewards != 0).sum()), 1)
    return _broadcast(alpha * (rewards - mean), inputs.loss_mask)


def raft(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """RAFT (arXiv:2304.06767): the reward itself on every policy token, no baseline.

    With loss reinforce and a 0/1 verifier this is filtered behaviour cloning (rejection-sampling
    fine-tuning): the NLL of the correct replies, the wrong ones weighing nothing."""
    return _broadcast(inputs.rewards, inputs.loss_mask)


def gdpo(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """GDPO (arXiv:2601.05242): each reward component group-normalised, weighted, summed, whitened.

    Each of reward_components is normalised within its group on its own (like grpo), so a weak
    component is not drowned by a strong one as in a weighted-sum grpo; the sum weighted by
    reward_weights is then whitened over the batch's policy tokens. Without components the
    reward is the one component. A KL folded into the reward and the overlong penalty are not
    components.
    """
    components = inputs.reward_components
    components = (inputs.rewards[:, None] if components is None else components).double()  # [B, K]
    weights = inputs.reward_weights
    weights = [1.0] * components.shape[1] if weights is None else weights.tolist()
    total = sum(
        w * _group_normalised(components[:, k], inputs.group_ids, algo.normalize_std)
        for k, w in enumerate(weights)
    )
    return _whiten(total[:, None].expand(inputs.loss_mask.shape), inputs.loss_mask).float()


def reinforce_pp(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """REINFORCE++: gamma-discounted return to go per policy token, whitened over the batch."""
    mask = inputs.loss_mask.bool()
    rewards = token_rewards_or_outcome(inputs).double()
    returns = torch.zeros_like(rewards)
    running = rewards.new_zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        # off-mask tokens (prompt, observations) neither add reward nor discount the return
        running = torch.where(mask[:, t], rewards[:, t] + algo.gamma * running, running)
        returns[:, t] = running
    return _whiten(returns, mask).float()


def reinforce_pp_baseline(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """REINFORCE++-baseline: reward minus its group mean, on every token, whitened over the batch.

    The batch whitening re-centres too (as in the paper and verl), so an all-equal group gets
    exactly 0 only when the token-weighted batch mean of the centred rewards is 0.
    """
    mean, _ = group_stats(inputs.rewards.double(), inputs.group_ids)
    centred = (inputs.rewards.double() - mean)[:, None].expand(inputs.loss_mask.shape)
    return _whiten(centred, inputs.loss_mask).float()


def remax(inputs: AdvInputs, algo: AlgoConfig, *, params: RemaxParams) -> torch.Tensor:
    """ReMax: reward minus the reward of a greedy rollout of the same prompt.

    With params.reward_to_go each token gets its reward to go minus it (verl's form)."""
    source = "the runner fills with a greedy rollout per prompt when algo.advantage='remax'"
    baseline = _require(inputs, "baseline_rewards", "remax", source).double()
    if not params.reward_to_go:
        return _broadcast(inputs.rewards.double() - baseline, inputs.loss_mask)
    adv = _reward_to_go(inputs) - baseline[:, None]
    return torch.where(inputs.loss_mask.bool(), adv, 0.0).float()


def counterfactual(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """MADA-RL's critic (arXiv 2607.18006): reward minus the mean reward of the generator answers
    the critic was shown for the same problem, so a critic gains only by beating the generators'
    consensus, not by repeating it."""
    source = "a debate (debate.rounds >= 2) fills with the shown generator answers' mean reward"
    baseline = _require(inputs, "baseline_rewards", "counterfactual", source).double()
    return _broadcast(inputs.rewards.double() - baseline, inputs.loss_mask)


def opo(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """OPO: reward minus the length-weighted group mean, b = sum(l_j r_j) / sum(l_j)."""
    rewards = inputs.rewards.double()
    lengths = inputs.loss_mask.bool().sum(dim=1).double()
    _, index, counts = torch.unique(inputs.group_ids, return_inverse=True, return_counts=True)
    weighted = rewards.new_zeros(len(counts)).index_add_(0, index, lengths * rewards)
    total = rewards.new_zeros(len(counts)).index_add_(0, index, lengths)
    # a group with no policy tokens has no baseline, and no tokens to put an advantage on
    baseline = weighted / total.clamp(min=1)
    return _broadcast(rewards - baseline[index], inputs.loss_mask)


def _gae(inputs: AdvInputs, algo: AlgoConfig, lam: torch.Tensor) -> torch.Tensor:
    """float64 GAE [B, T] with a per-row lambda [B], over policy tokens only.

    Off-mask tokens (prompt, multi-turn observations) are skipped, not zeroed: the last action
    token of turn i bootstraps from the first action token of turn i+1 (SAO's skip-observation
    GAE), delta = r + gamma V(a_i+1,0) - V(a_i,N), A(a_i,N) = delta + gamma lam A(a_i+1,0).
    """
    source = "the trainer fills from the critic when algo.advantage='gae'"
    values = _require(inputs, "values", "gae", source).double()
    mask = inputs.loss_mask.bool()
    rewards = token_rewards_or_outcome(inputs).double()
    adv = torch.zeros_like(rewards)
    next_value = rewards.new_zeros(rewards.shape[0])  # 0 after the last token
    next_adv = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + algo.gamma * next_value - values[:, t]
        a = delta + algo.gamma * lam * next_adv
        on = mask[:, t]
        adv[:, t] = torch.where(on, a, 0.0)
        next_value = torch.where(on, values[:, t], next_value)
        next_adv = torch.where(on, a, next_adv)
    return adv


def policy_lambda(inputs: AdvInputs, algo: AlgoConfig, params: GaeParams) -> torch.Tensor:
    """Per-row GAE lambda [B] of the advantages: algo.lam, or 1 - 1/(lam_alpha * len) (VAPO)
    with len the row's policy tokens when params.lam_mode = 'length_adaptive' (clamped at 0)."""
    mask = inputs.loss_mask
    if params.lam_mode == "fixed":
        return torch.full((mask.shape[0],), algo.lam, dtype=torch.float64, device=mask.device)
    lengths = mask.bool().sum(dim=1).double().clamp(min=1)
    return (1 - 1 / (params.lam_alpha * lengths)).clamp(min=0)


def gae_targets(inputs: AdvInputs, algo: AlgoConfig, *, params: GaeParams) -> torch.Tensor:
    """Critic targets of gae, float32 [B, T]: GAE + V with lam, or with lam = 1 (the discounted
    return to go) when params.lam_mode = 'length_adaptive'; zero off the loss mask."""
    mask = inputs.loss_mask
    lam = 1.0 if params.lam_mode == "length_adaptive" else algo.lam
    rows = torch.full((mask.shape[0],), lam, dtype=torch.float64, device=mask.device)
    adv = _gae(inputs, algo, rows)  # raises when values are missing
    return torch.where(mask.bool(), adv + inputs.values.double(), 0.0).float()


def gae_returns(
    inputs: AdvInputs, algo: AlgoConfig, *, params: GaeParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and critic targets (gae_targets), both float32 [B, T]."""
    return gae(inputs, algo, params=params), gae_targets(inputs, algo, params=params)


def gae(inputs: AdvInputs, algo: AlgoConfig, *, params: GaeParams) -> torch.Tensor:
    """GAE from critic values: A_t = delta_t + gamma lam A_t+1, delta_t = r_t + gamma V_t+1 - V_t;
    lam per row from policy_lambda, observation tokens skipped; whitened over the batch with
    the setting whiten_advantages."""
    adv = _gae(inputs, algo, policy_lambda(inputs, algo, params))
    return (_whiten(adv, inputs.loss_mask) if params.whiten_advantages else adv).float()


def running_mean(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """Running-mean baseline: A = r - b, b a moving average of earlier steps' rewards (RunningMean)."""
    source = "the trainer fills from its RunningMean of earlier steps' rewards"
    baseline = _require(inputs, "reward_mean", "running_mean", source)
    return _broadcast(inputs.rewards.double() - baseline.double(), inputs.loss_mask)


class RunningMean:
    """Baseline state of running_mean: b <- decay * b + (1 - decay) * batch mean reward.

    `value` is 0.0 before any update; the first update sets it to the batch mean."""

    def __init__(self, decay: float):
        self.decay, self.value, self.updates = decay, 0.0, 0

    def update(self, rewards: torch.Tensor) -> float:
        if rewards.numel():
            mean = float(rewards.double().mean())
            first = self.updates == 0
            self.value = mean if first else self.decay * self.value + (1 - self.decay) * mean
            self.updates += 1
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.value, self.updates = float(state["value"]), int(state["updates"])


def _binom_ratio(a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    """C(a, k) / C(b, k) as prod_{i<k} (a - i) / (b - i), with C(a, k) = 0 for a < k."""
    i = torch.arange(k, dtype=torch.float64, device=a.device)
    return ((a[:, None] - i).clamp(min=0) / (b[:, None] - i)).prod(dim=1)


def passk(inputs: AdvInputs, algo: AlgoConfig, *, params: PassKParams) -> torch.Tensor:
    """Pass@k training (Chen et al. 2025, analytic): advantages that maximise pass@k, 0/1 rewards.

    Per group of N completions with N_neg wrong and k = params.k (1 <= k <= N-1):
      p = 1 - C(N_neg, k) / C(N, k)                      (group pass@k estimate)
      std = sqrt(p (1 - p))
      A_pos = (1 - p) / std,   A_neg = (1 - p - C(N_neg-1, k-1) / C(N-1, k-1)) / std
    std gets EPS added, as in the authors' code. For k = 1 this is (r - mean) / population std,
    i.e. grpo times sqrt(N / (N-1)): grpo divides by the unbiased std.
    """
    rewards = inputs.rewards.double()
    if not ((rewards == 0) | (rewards == 1)).all():
        raise ValueError(
            "advantage 'passk' needs 0/1 rewards; got others (a weighted reward mix or "
            "algo.kl_in_reward=true?). Fix: a binary verifier reward and kl_in_reward=false."
        )
    _, index, counts = torch.unique(inputs.group_ids, return_inverse=True, return_counts=True)
    k = params.k
    if len(counts) and k >= int(counts.min()):
        raise ValueError(
            f"advantage 'passk' needs algo.advantage_params.k < group size (k = N makes every "
            f"advantage 0); got k={k} with a group of {int(counts.min())}. Fix: lower "
            f"algo.advantage_params.k or raise rollout.group_size."
        )
    n = counts.double()
    n_neg = rewards.new_zeros(len(counts)).index_add_(0, index, 1 - rewards)
    fail = _binom_ratio(n_neg, n, k)  # 1 - p, computed directly: no cancellation near p = 1
    std = (fail * (1 - fail)).sqrt() + EPS
    a_pos = fail / std
    a_neg = (fail - _binom_ratio(n_neg - 1, n - 1, k - 1)) / std
    adv = torch.where(rewards == 1, a_pos[index], a_neg[index])
    return _broadcast(adv, inputs.loss_mask)


def max_passk(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """Pass@k training, max form (arXiv:2503.19595): only each group's best gets r_max - r_second.

    Divided by the group std when normalize_std (as verl's grpo_passk); every other sample gets
    0, a tie for the best gives 0, and of tied rows the first is the best.
    """
    rewards = inputs.rewards.double()
    _, index, counts = torch.unique(inputs.group_ids, return_inverse=True, return_counts=True)
    rows = torch.arange(len(rewards), device=rewards.device)
    top = rewards.new_full((len(counts),), -torch.inf).scatter_reduce(0, index, rewards, "amax")
    tops = rewards == top[index]
    first = torch.full_like(counts, len(rewards)).scatter_reduce(0, index[tops], rows[tops], "amin")
    best = rows == first[index]
    second = top.scatter_reduce(0, index[~best], rewards[~best], "amax", include_self=False)
    gap = (top - second)[index]  # a group of one keeps second = top: gap 0
    if algo.normalize_std:
        gap = gap / (group_stats(rewards, inputs.group_ids)[1] + EPS)
    return _broadcast(torch.where(best, gap, 0.0), inputs.loss_mask)


def tree(inputs: AdvInputs, algo: AlgoConfig, *, params: TreeParams) -> torch.Tensor:
    """Tree rollouts (TreeRL-style): each token gets its segment's node value minus its parent's.

    A node's value is the mean outcome of the leaves below it, so along a leaf the segment
    advantages add up to its reward minus the group mean. params.outcome_coef (default 0)
    adds that many times the GRPO outcome advantage (group-normalised by the std when
    algo.normalize_std). With params.dedup_shared (default true) every token's advantage is
    scaled by segment_weights, 1 / the rows sharing its segment, so a prefix shared by c leaves
    is pushed once in total rather than once per leaf.
    """
    source = "the trainer fills from info['tree'] with rlvr.rollout.tree.segment_tensors"
    adv = _require(inputs, "segment_advantages", "tree", source).double()
    weights = _require(inputs, "segment_weights", "tree", source).double()
    if params.outcome_coef:
        outcome = _group_normalised(inputs.rewards.double(), inputs.group_ids, algo.normalize_std)
        adv = adv + params.outcome_coef * outcome[:, None]
    if params.dedup_shared:
        adv = adv * weights
    return torch.where(inputs.loss_mask.bool(), adv, 0.0).float()


def prefix_tree(inputs: AdvInputs, algo: AlgoConfig, *, params: PrefixTreeParams) -> torch.Tensor:
    """Tree credit from plain samples: each token's node value minus its parent node's.

    A group's replies form a tree by their shared token prefixes; a token leads from one node
    to the next, and a node's value is the mean reward of the replies through it.

    A token every reply through its node also chose gets 0; all credit lands where replies
    part, so a slip at token 90 of a worked solution is blamed there and not on the 89 tokens
    before it. Along a reply the credits add up to its GRPO advantage (over the group std with
    algo.normalize_std). Once a reply runs alone its later tokens get 0;
    params.outcome_coef adds that many times the GRPO advantage to every token. Episodes
    that part on an environment's reply put that credit on an observation token, off the loss
    mask: the policy did not choose it.
    """
    source = "the trainer fills from Batch.input_ids"
    targets = _require(inputs, "target_ids", "prefix_tree", source)
    rewards = inputs.rewards.double()
    width = targets.shape[1]
    adv = torch.zeros(targets.shape, dtype=torch.float64, device=targets.device)
    for group in inputs.group_ids.unique():
        rows = torch.nonzero(inputs.group_ids == group).squeeze(1)
        ids = targets[rows]  # [G, T]
        same = (ids[:, None, :] == ids[None, :, :]).long()  # [G, G, T]
        shared = same.cumprod(dim=-1).sum(dim=-1)  # [G, G] tokens two replies share from the start
        # through[i, j, t]: reply j passes through the node reply i reaches after t target tokens
        through = shared[:, :, None] >= torch.arange(width + 1, device=ids.device)  # [G, G, T+1]
        value = (through * rewards[rows][None, :, None]).sum(1) / through.sum(1)  # [G, T+1]
        adv[rows] = value[:, 1:] - value[:, :-1]
    mean, spread = group_stats(rewards, inputs.group_ids)
    scale = spread + EPS if algo.normalize_std else torch.ones_like(spread)
    adv = (adv + params.outcome_coef * (rewards - mean)[:, None]) / scale[:, None]
    return torch.where(inputs.loss_mask.bool(), adv, 0.0).float()


def _otb(inputs: AdvInputs, steps: torch.Tensor, estimator: str) -> torch.Tensor:
    """OTB advantages G_t - B_t, with B_t = sum_i G_t W_t / sum_i W_t over the group's samples
    that have a policy token at step `steps` [B, T] (long; read on policy tokens only)."""
    source = "the trainer fills from its old-logprob pass when the estimator requires them"
    logprobs = _require(inputs, "old_logprobs", estimator, source).double()
    squares = _require(inputs, "sum_pi_squared", estimator, source).double()
    mask = inputs.loss_mask.bool()
    returns = _reward_to_go(inputs)  # G_t
    # |onehot(y_t) - pi_t|^2 = 1 - 2 pi(y_t) + sum_v pi_v^2: the squared norm of the gradient of
    # log pi(y_t) in the logits, the paper's forward-only proxy of a token's gradient energy
    energy = torch.where(mask, 1 - 2 * logprobs.exp() + squares, 0.0).cumsum(-1)  # W_t
    _, group, counts = torch.unique(inputs.group_ids, return_inverse=True, return_counts=True)
    width = mask.shape[1]
    cells = (group[:, None] * width + steps)[mask]  # each policy token's (group, step)

    def per_cell(values: torch.Tensor) -> torch.Tensor:
        return values.new_zeros(len(counts) * width).index_add_(0, cells, values[mask])

    weighted, total = per_cell(returns * energy), per_cell(energy)
    shared = per_cell(torch.ones_like(energy)) > 1
    # where no other sample reaches that step, its own return would cancel itself: baseline 0
    # (the paper's handle_zero_tail, for the tail of a group's longest sample)
    baseline = torch.where(shared, weighted / (total + OTB_EPS), 0.0)[cells]
    adv = torch.zeros_like(returns)
    adv[mask] = returns[mask] - baseline
    return adv.float()


def otb(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """OTB (arXiv:2602.07078): reward to go minus a per-step group baseline weighted by W_t.

    Optimal token baseline: B_t is the group's G_t weighted by W_t = cumsum(1 - 2 pi_t +
    sum_v pi_v^2); steps count from each sample's first policy token, observation tokens
    included."""
    mask = inputs.loss_mask.bool()
    first = mask.int().argmax(dim=1, keepdim=True)  # [B, 1]
    steps = torch.arange(mask.shape[1], device=mask.device) - first
    return _otb(inputs, steps.clamp(min=0), "otb")


def mt_otb(inputs: AdvInputs, algo: AlgoConfig) -> torch.Tensor:
    """Multi-turn OTB (verl's tir_optimal_token_baseline): otb whose steps skip observations.

    Steps count policy tokens only, so the k-th generated token of every sample of a group
    shares a baseline wherever observations put it."""
    return _otb(inputs, inputs.loss_mask.bool().long().cumsum(-1) - 1, "mt_otb")


def _soft_values(inputs: AdvInputs, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 [B, T] each: the pre-update policy read as Q = beta (x_old - x_ref) on its logits
    x, the soft value V = beta (logsumexp x_old - logsumexp x_ref) of the state each position
    predicts from, and the Q of the token sampled there (its logit x = log pi + logsumexp x)."""
    source = "the trainer fills from the old-policy and reference passes"
    old, old_lse, ref, ref_lse = (
        _require(inputs, name, "soft_bellman", source)
        for name in ("old_logprobs", "old_normaliser", "ref_logprobs", "ref_normaliser")
    )
    # in the passes' precision, widened for the return recursion (tests/records pins this rounding)
    values = beta * (old_lse - ref_lse)
    q_values = beta * (old + old_lse - ref - ref_lse)
    return values.double(), q_values.double()


def soft_bellman(inputs: AdvInputs, algo: AlgoConfig, *, params: SoftQParams) -> torch.Tensor:
    """Soft Q-learning targets, soft lambda-returns per policy token (pair with loss soft_q).

    G_t = r_t + gamma (V(s') + lam (G' - Q(s', a'))), where s', a' are the state and token of the
    row's next policy token (after any observation) and G_t = r_t on the last. V and Q are the
    pre-update policy's (a target network refreshed every step), read off its logits and the
    reference's with params.beta. lam = 0 is the one-step target r + gamma V(s'); lam = 1 the
    soft Monte Carlo return, the rewards to go minus beta log(pi / pi_ref) of the later tokens.
    Path consistency holds for any token sequence at the soft optimum (PCL, arXiv:1702.08892),
    so the targets stay valid on logged, off-policy replies. Regression targets for Q, not
    advantages: nothing is centred within a group."""
    values, q_values = _soft_values(inputs, params.beta)
    mask = inputs.loss_mask.bool()
    rewards = token_rewards_or_outcome(inputs).double()
    targets = torch.zeros_like(rewards)
    following = rewards.new_zeros(len(rewards))  # G', V(s'), Q(s', a') of the next policy token
    next_value, next_q = torch.zeros_like(following), torch.zeros_like(following)
    for t in reversed(range(mask.shape[1])):
        on = mask[:, t]
        bootstrap = next_value + algo.lam * (following - next_q)  # 0 after a row's last token
        target = rewards[:, t] + algo.gamma * bootstrap
        targets[:, t] = torch.where(on, target, 0.0)
        following = torch.where(on, target, following)
        next_value = torch.where(on, values[:, t], next_value)
        next_q = torch.where(on, q_values[:, t], next_q)
    return targets.float()


for _fn in (grpo, mt_grpo, dr_grpo, rloo, gpg, gdpo, reinforce_pp_baseline, opo, max_passk, tree,
            prefix_tree, otb, mt_otb, poise):  # fmt: skip
    _fn.min_group_size = 2  # a group of one has no baseline to compare against
passk.min_group_size = lambda params: params.k + 1  # k = N would make every advantage zero
gae.requires = ("values",)
gae.critic_targets = gae_targets  # the trainer fits the critic to these (default: A + V)
running_mean.requires = ("reward_mean",)
counterfactual.requires = ("baseline_rewards",)
counterfactual.critic_only = True  # its baseline exists only for a debate's critic
remax.requires = ("baseline_rewards",)
mt_grpo.requires = ("turn_rewards", "turn_ids")
tree.requires = ("segment_advantages", "segment_weights")
prefix_tree.requires = ("target_ids",)
otb.requires = mt_otb.requires = ("old_logprobs", "sum_pi_squared")
poise.requires = ("probe_predictions",)
soft_bellman.requires = ("old_logprobs", "old_normaliser", "ref_logprobs", "ref_normaliser")
soft_bellman.q_targets = True  # its output is what loss soft_q regresses on, and only that

mt_grpo.Params = MtGrpoParams
remax.Params = RemaxParams
gae.Params = GaeParams
passk.Params = PassKParams
tree.Params = TreeParams
prefix_tree.Params = PrefixTreeParams
soft_bellman.Params = SoftQParams

ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": grpo,
    "mt_grpo": mt_grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "gpg": gpg,
    "raft": raft,
    "gdpo": gdpo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
    "remax": remax,
    "counterfactual": counterfactual,
    "opo": opo,
    "gae": gae,
    "running_mean": running_mean,
    "passk": passk,
    "max_passk": max_passk,
    "tree": tree,
    "prefix_tree": prefix_tree,
    "otb": otb,
    "mt_otb": mt_otb,
    "poise": poise,
    "soft_bellman": soft_bellman,
}
