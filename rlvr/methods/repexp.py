"""RepExp (arXiv 2510.11686): a bonus for rollouts whose representation under the starting policy
points where their group's siblings do not, paid in groups that hold a correct rollout."""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from rlvr.config import ConfigError
from rlvr.train.hooks import Method, MethodParams, Run, Step
from rlvr.train.profile import timed
from rlvr.train.reference import ReferencePolicy
from rlvr.types import Batch


class Params(MethodParams):
    beta: float = Field(
        0.01,
        gt=0,
        description="Add beta times each rollout's elliptical bonus (its leverage among its group, "
        "on the starting policy's last hidden states averaged over the reply) to its reward, in "
        "groups with a correct rollout (the paper: 0.01).",
    )
    dim: int = Field(
        32, ge=1, description="Dimensions of the sparse random projection (32; 128 for "
        "long-answer tasks), drawn afresh each step.",
    )  # fmt: skip
    ridge_lambda: float = Field(
        0.01, gt=0, description="The ridge lambda of Sigma = lambda I + sum_j h_j h_j^T."
    )
    leave_one_out: bool = Field(
        False,
        description="Score h_i against its siblings alone, l_i / (1 - l_i), instead of the "
        "leverage l_i.",
    )


def backbone(model) -> torch.nn.Module:
    """The decoder stack under the LM head (LlamaModel in LlamaForCausalLM, found through a peft
    wrapper too): its output is the final-norm hidden states, with no vocabulary projection."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    stack = getattr(inner, "base_model", inner)
    if stack is inner:
        raise ConfigError(
            f"{type(inner).__name__} names no decoder stack (base_model_prefix); RepExp's bonus "
            "reads its last hidden states: use a Hugging Face causal LM, or drop methods.repexp"
        )
    return stack


@torch.no_grad()
def response_hidden_means(model, batch: Batch, micro_batch_size: int) -> torch.Tensor:
    """float32 [B, H]: each row's last hidden state averaged over its policy tokens (every turn's),
    read where the token is the input, as the paper's mean over response positions."""
    stack = backbone(model)
    lengths = batch.attention_mask.sum(-1)
    # [B, T]: position t holds token t, and loss_mask column t describes token t + 1
    response = torch.cat([torch.zeros_like(batch.loss_mask[:, :1]), batch.loss_mask], -1)
    out = torch.zeros(len(batch), model.config.hidden_size)
    for rows in lengths.argsort().split(micro_batch_size):  # similar lengths pad each other less
        width = int(lengths[rows].max())
        hidden = stack(
            input_ids=batch.input_ids[rows, :width].to(model.device),
            attention_mask=batch.attention_mask[rows, :width].to(model.device),
        ).last_hidden_state.float()
        weights = response[rows, :width].to(hidden.device)
        sums = (hidden * weights[..., None]).sum(1)
        out[rows] = (sums / weights.sum(1, keepdim=True).clamp(min=1)).cpu()
    return out


def sparse_projection(hidden_size: int, dim: int, seed: int) -> torch.Tensor:
    """[hidden_size, dim]: scikit-learn's sparse random projection (Achlioptas / Li, density
    1/sqrt(hidden_size)), drawn from `seed`, which preserves distances up to a small distortion."""
    # Imported here: scikit-learn (with scipy and pandas) adds 1.5 s to every run's start-up,
    # and only RepExp's bonus draws a projection.
    from sklearn.random_projection import SparseRandomProjection

    projection = SparseRandomProjection(dim, density="auto", random_state=seed)
    projection.fit(np.zeros((1, hidden_size)))
    return torch.from_numpy(projection.components_.toarray().T).float()


def step_seed(seed: int, step: int) -> int:
    """The projection's seed at a step: a fresh draw each step, the same on a resumed run."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1)[0])


def elliptical_bonus(
    features: torch.Tensor,
    group_ids: torch.Tensor,
    correct: torch.Tensor,
    lam: float,
    leave_one_out: bool = False,
) -> torch.Tensor:
    """The exploration bonus [B], float64. Within each group the rollouts' features [B, d],
    centred on the group's mean, give Sigma = lam I + sum_j h_j h_j^T; rollout i scores its
    leverage l_i = h_i^T Sigma^-1 h_i, large when it points where its siblings do not.
    `leave_one_out` scores h_i^T (Sigma - h_i h_i^T)^-1 h_i instead, which is l_i / (1 - l_i)
    (Sherman-Morrison). A group with no `correct` [B] rollout gets 0: novelty among wrong
    answers is not worth rewarding."""
    bonus = torch.zeros(len(features), dtype=torch.float64)
    for group in group_ids.unique():
        rows = group_ids == group
        if not correct[rows].any():
            continue
        h = features[rows].double()
        h = h - h.mean(0)
        sigma = lam * torch.eye(h.shape[1], dtype=h.dtype) + h.T @ h
        leverage = (h * torch.linalg.solve(sigma, h.T).T).sum(-1)
        bonus[rows] = leverage / (1 - leverage) if leave_one_out else leverage
    return bonus


class RepExp(Method):
    """RepExp (arXiv 2510.11686): a bonus for rollouts whose representation under the starting
    policy points where their group's siblings do not, in groups with a correct rollout."""

    Params = Params
    reads_labels = True  # the bonus is paid only in groups the verifier found a right answer in

    def setup(self, run: Run) -> None:
        self.explorer = ReferencePolicy(run.model)  # the frozen start, not the moving policy

    def reward_bonus(self, step: Step) -> torch.Tensor:
        p, batch, seed = self.params, step.batch, self.cfg.train.seed
        with timed(step.timings, "time/exploration"):
            with self.explorer.frozen() as start:
                hidden = response_hidden_means(start, batch, self.cfg.train.micro_batch_size)
            features = hidden @ sparse_projection(
                hidden.shape[1], p.dim, step_seed(seed, step.index)
            )
            correct = torch.tensor([t.correct for t in step.trajectories])
            bonus = p.beta * elliptical_bonus(
                features, batch.group_ids, correct, p.ridge_lambda, p.leave_one_out
            )
        groups = batch.group_ids.unique()
        rewarded = sum(bool(correct[batch.group_ids == g].any()) for g in groups)
        step.metrics.update({
            "exploration/bonus": float(bonus.mean()),
            "exploration/bonus_max": float(bonus.max()),
            "exploration/groups": rewarded / len(groups),
        })  # fmt: skip
        return bonus
