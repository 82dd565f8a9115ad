"""The KL-regularised actor-critic of Nishikawa & Suzuki (hierarchical rewards): each step fits a
critic W on the sampled replies, then moves the policy toward the Gibbs policy pi_ref exp(W / beta)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from rlvr.algos.advantages import AdvInputs, at_last_policy_token
from rlvr.config import ConfigError
from rlvr.train.critic import Critic
from rlvr.train.hooks import Method, MethodParams, Run, Step
from rlvr.train.profile import timed
from rlvr.train.reference import ReferencePolicy
from rlvr.types import Batch


class Params(MethodParams):
    critic: Literal["value_model", "table"] = Field(
        "value_model",
        description="What W is: 'value_model', a transformer value model (rlvr.train.critic, "
        "algo.critic_lr, algo.critic_updates) regressing every reply prefix on the reply's "
        "reward; 'table', one W per distinct (prompt, reply), moved toward the mean reward it "
        "got in the step (for tasks whose replies repeat; 0 for a reply never seen). Both move "
        "W at most algo.value_clip a step.",
    )
    beta: float = Field(
        0.05,
        gt=0,
        description="The KL strength of J = E[W] - beta KL(pi || pi_ref) (the paper's rho, the "
        "Gibbs actor's temperature): the policy moves toward pi_ref exp(W / beta).",
    )


def group_softmax(logits: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """float64 [B]: the softmax of `logits` [B] within each group of `group_ids` [B]."""
    groups = group_ids.unique(return_inverse=True)[1]
    logits = logits.double()
    top = torch.full((int(groups.max()) + 1,), -torch.inf, dtype=torch.float64)
    top = top.scatter_reduce(0, groups, logits, "amax")
    exp = (logits - top[groups]).exp()
    return exp / torch.zeros_like(top).index_add(0, groups, exp)[groups]


def gibbs_weights(
    scores: torch.Tensor,
    ref_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    group_ids: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """p [B]: the target pi*(y) = pi_ref(y) exp(W(y) / beta) / Z on each group's replies y_i ~ mu,
    as self-normalised importance weights: softmax_i(W_i / beta + log pi_ref(y_i) - log mu(y_i)).
    All but `group_ids` and `beta` are [B] per reply (logprobs summed over its tokens)."""
    return group_softmax(scores.double() / beta + ref_logprobs - sampler_logprobs, group_ids)


def projection_advantages(target: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """A [B] = n_g p_i, n_g the size of reply i's group: with the reinforce loss averaged over
    replies, -sum_i p_i log pi(y_i) per group, the cross-entropy of the policy against the target
    on the group (a weighted maximum-likelihood step), whose gradient is the importance-sampled
    gradient of KL(pi* || pi): -E_pi*[grad log pi]."""
    groups = group_ids.unique(return_inverse=True)[1]
    return torch.bincount(groups).double()[groups] * target


def effective_share(weights: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Mean over groups of 1 / (n_g sum_i p_i^2): 1 when `weights` are uniform in a group, 1/n_g
    when one reply holds them all."""
    groups = group_ids.unique(return_inverse=True)[1]
    squares = torch.zeros(int(groups.max()) + 1, dtype=torch.float64).index_add(
        0, groups, weights.double() ** 2
    )
    return float((1 / (torch.bincount(groups) * squares)).mean())


def clipped_step(old: torch.Tensor, target: torch.Tensor, clip: float) -> torch.Tensor:
    """The paper's critic update W_{h+1} = W_h + clip(T_h - W_h, -clip, +clip)."""
    return old + (target - old).clamp(-clip, clip)


class ValueCritic:
    """W(y) = V at the reply's last token of a value model fitted, before it scores, on the
    step's replies: every prefix regresses on the reply's reward (least squares, gamma = 1, so
    V(prefix) -> E[f | prefix]), each fit step moving V at most algo.value_clip (PPO's clip)."""

    def __init__(self, model, cfg):
        self.critic = Critic(model, cfg)
        self.generator = torch.Generator().manual_seed(cfg.train.seed)

    def fit_and_score(self, batch: Batch, rewards: torch.Tensor) -> tuple[torch.Tensor, dict]:
        mask = batch.loss_mask
        before = self.critic.values(batch)
        metrics = self.critic.update(batch, rewards[:, None] * mask, before, self.generator)
        return at_last_policy_token(self.critic.values(batch), mask), metrics

    def state_dict(self) -> dict:
        return {"critic": self.critic.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.critic.load_state_dict(state["critic"])
        self.generator.set_state(state["generator"])


class TableCritic:
    """One W per distinct (prompt, reply) token sequence, 0 until seen: each step's least-squares
    fit on one indicator per sequence is its mean reward T there, and W takes the clipped step."""

    def __init__(self, clip: float):
        self.clip, self.scores = clip, {}

    def fit_and_score(self, batch: Batch, rewards: torch.Tensor) -> tuple[torch.Tensor, dict]:
        keys = [
            tuple(ids[on.bool()].tolist()) for ids, on in zip(batch.input_ids, batch.attention_mask)
        ]
        means = {}
        for key, reward in zip(keys, rewards.tolist()):
            means.setdefault(key, []).append(reward)
        for key, seen in means.items():
            old = torch.tensor(self.scores.get(key, 0.0))
            self.scores[key] = float(
                clipped_step(old, torch.tensor(sum(seen) / len(seen)), self.clip)
            )
        return torch.tensor([self.scores[key] for key in keys]), {
            "critic/table_size": len(self.scores)
        }

    def state_dict(self) -> dict:
        return {"scores": dict(self.scores)}

    def load_state_dict(self, state: dict) -> None:
        self.scores = dict(state["scores"])


class HierarchicalActorCritic(Method):
    """Nishikawa & Suzuki's alternation of sampling, critic fitting and a policy update toward
    the KL-regularised optimum, one round per step.

    (1) KL-regularised sampling: the
    replies come from the policy, the last round's projection of the Gibbs actor. (2) Critic
    fitting, on the step's replies before W scores them (ValueCritic or TableCritic), each fit
    step moving W at most algo.value_clip (the paper's W_{h+1} = W_h + clip(T_h - W_h, +-Delta)).
    (3) Policy update toward the maximiser of E[W] - beta KL(pi || pi_ref),

        pi*(y | x) = pi_ref(y | x) exp(W(x, y) / beta) / Z(x),

    by one step on KL(pi* || pi) estimated on each prompt's group of replies y_i ~ mu (mu = the
    sampler: the policy, or any other, e.g. pi_ref; its logprobs come with the replies):
    p_i = softmax_i(W_i / beta + log pi_ref(y_i) - log mu(y_i)), A_i = n p_i on every reply token,
    and the reinforce loss summed over a reply's tokens: -sum_i p_i log pi(y_i) per group, the
    policy's cross-entropy against the target (weighted maximum likelihood, as an M-step: it
    raises the replies the target favours and lowers the rest only through the normaliser).
    Not built: the paper's prefix-mass stopping rule (kappa_0) and its depth curriculum."""

    Params = Params

    @classmethod
    def check(cls, params: Params, cfg, task) -> None:
        a, fixes = cfg.algo, []
        if a.kl_coef != 0:
            fixes.append("algo.kl_coef=0 (the KL to pi_ref is the target's, at its beta)")
        if a.tis != "off":
            fixes.append("algo.tis=off (the target's weights already divide by the sampler's mu)")
        if a.loss != "reinforce" or a.loss_agg != "seq-mean-token-sum":
            fixes.append(
                "algo.loss=reinforce and algo.loss_agg=seq-mean-token-sum (the weights multiply "
                "each reply's whole log-probability)"
            )
        if a.advantage == "gae":
            fixes.append("an algo.advantage other than gae (the method fits its own critic)")
        if cfg.rollout.group_size < 2:
            fixes.append("rollout.group_size >= 2 (a reply alone gets p = 1 whatever W says)")
        if fixes:
            raise ConfigError(
                "methods.hierarchical moves the policy toward pi_ref exp(W / beta) with its own "
                f"weights and critic; fix: {'; '.join(fixes)} (or drop methods.hierarchical)"
            )

    def setup(self, run: Run) -> None:
        self.reference = ReferencePolicy(run.model)
        if self.params.critic == "table":
            self.critic = TableCritic(run.cfg.algo.value_clip)
        else:
            self.critic = ValueCritic(run.model, run.cfg)

    def advantages(self, step: Step, inputs: AdvInputs) -> torch.Tensor:
        batch, cfg, mask = step.batch, self.cfg, inputs.loss_mask
        micro, temperature = cfg.train.micro_batch_size, cfg.rollout.temperature
        with timed(step.timings, "time/critic"):
            scores, fitted = self.critic.fit_and_score(batch, inputs.rewards)
            step.metrics.update(fitted)
        with timed(step.timings, "time/ref_logprobs"):
            ref = (self.reference.logprobs(batch, micro, temperature) * mask).sum(-1)
        sampler = (batch.behaviour_logprobs * mask).sum(-1)
        groups = inputs.group_ids
        target = gibbs_weights(scores, ref.double(), sampler.double(), groups, self.params.beta)
        step.metrics.update({
            "hierarchical/score": float(scores.mean()),
            "hierarchical/score_error": float((scores - inputs.rewards).abs().mean()),
            "hierarchical/target_share": effective_share(target, groups),
            # on-policy: an estimate of KL(pi || pi_ref), per reply
            "hierarchical/sampler_minus_ref": float((sampler - ref).mean()),
        })  # fmt: skip
        advantages = projection_advantages(target, groups)
        return (advantages[:, None] * mask).float()

    def state_dict(self) -> dict:
        state = {"critic": self.critic.state_dict()}
        if not self.reference.shared:  # a copy of the start: a resumed policy is no longer it
            state["reference"] = self.reference.model.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.critic.load_state_dict(state["critic"])
        if "reference" in state:
            self.reference.model.load_state_dict(state["reference"])
