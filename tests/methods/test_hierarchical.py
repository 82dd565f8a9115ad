"""The KL-regularised actor-critic: the Gibbs target and the projection step by hand on three
replies, its Monte Carlo estimate from either sampler, the refused settings, and a step through
the trainer."""

import math
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.methods.hierarchical import (
    HierarchicalActorCritic,
    Params,
    TableCritic,
    clipped_step,
    effective_share,
    gibbs_weights,
    group_softmax,
    projection_advantages,
)
from rlvr.rewards import REWARDS
from rlvr.train.trainer import Trainer
from rlvr.types import Score

REF = torch.tensor([0.5, 0.3, 0.2]).double()  # pi_ref over three one-token replies
SCORES = torch.tensor([0.0, 1.0, 2.0]).double()  # the critic's W of each


def gibbs(beta: float) -> torch.Tensor:
    """pi* = pi_ref exp(W / beta) / Z over all three replies."""
    weights = REF * (SCORES / beta).exp()
    return weights / weights.sum()


def test_the_target_on_three_replies_is_the_hand_computed_gibbs_policy():
    one_group = torch.zeros(3, dtype=torch.long)
    # each reply once, as if drawn from the uniform mu = 1/3: the weights are pi* itself
    uniform = torch.full((3,), math.log(1 / 3)).double()
    p = gibbs_weights(SCORES, REF.log(), uniform, one_group, beta=1.0)
    # 0.5, 0.3 e, 0.2 e^2 over their sum 2.79329
    assert p.tolist() == pytest.approx([0.1790000, 0.2919435, 0.5290565], abs=1e-7)
    # drawn from mu = (0.5, 0.25, 0.25) at beta 0.5: each weight divided by mu, then normalised
    mu = torch.tensor([0.5, 0.25, 0.25]).double().log()
    p = gibbs_weights(SCORES, REF.log(), mu, one_group, beta=0.5)
    assert p.tolist() == pytest.approx([0.0186757, 0.1655954, 0.8157289], abs=1e-7)


def projection_gradient(logits: torch.Tensor, replies: torch.Tensor, sampler: torch.Tensor):
    """The reinforce loss with the method's advantages on one group of `replies` (indices) drawn
    from `sampler` (a distribution over the three), as the update takes it: the gradient on the
    policy's logits."""
    logits = logits.clone().requires_grad_(True)
    logprobs = logits.log_softmax(-1)[replies]
    group = torch.zeros(len(replies), dtype=torch.long)
    mu = sampler.log()[replies]
    target = gibbs_weights(SCORES[replies], REF.log()[replies], mu, group, beta=1.0)
    advantages = projection_advantages(target, group)
    (-(advantages * logprobs).mean()).backward()  # seq-mean of -A * (the reply's log pi)
    return logits.grad


def test_the_projection_step_is_the_gradient_of_kl_from_the_gibbs_policy():
    logits = torch.tensor([0.2, -0.1, 0.4]).double()
    every_reply = torch.arange(3)
    grad = projection_gradient(logits, every_reply, torch.full((3,), 1 / 3).double())
    policy = logits.softmax(-1)
    # softmax(0.2, -0.1, 0.4) = (0.3376, 0.2501, 0.4123), minus pi* above
    assert grad.tolist() == pytest.approx([0.1586, -0.0419, -0.1167], abs=1e-4)
    assert grad.tolist() == pytest.approx((policy - gibbs(1.0)).tolist(), abs=1e-12)
    # the same as autograd's gradient of KL(pi* || pi)
    z = logits.clone().requires_grad_(True)
    target = gibbs(1.0)
    (target * (target.log() - z.log_softmax(-1))).sum().backward()
    assert torch.allclose(grad, z.grad, atol=1e-12)


@pytest.mark.parametrize("sampler", ["policy", "reference"])
def test_sampled_groups_estimate_that_gradient_from_either_sampler(sampler):
    logits = torch.tensor([1.0, 0.0, -0.5]).double()
    policy = logits.softmax(-1)
    mu = policy if sampler == "policy" else REF
    draws = torch.multinomial(
        mu, 20000, replacement=True, generator=torch.Generator().manual_seed(0)
    )
    grad = projection_gradient(logits, draws, mu)
    assert grad.tolist() == pytest.approx((policy - gibbs(1.0)).tolist(), abs=0.02)


def test_groups_are_weighted_apart():
    groups = torch.tensor([0, 0, 1, 1, 1])
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5]).double()
    zeros = torch.zeros(5).double()
    p = gibbs_weights(scores, zeros, zeros, groups, beta=0.5)
    assert p.tolist() == pytest.approx(
        [math.e**2 / (1 + math.e**2), 1 / (1 + math.e**2), 1 / (2 + math.e), 1 / (2 + math.e),
         math.e / (2 + math.e)], abs=1e-12,
    )  # fmt: skip
    advantages = projection_advantages(p, groups)
    assert advantages.tolist() == pytest.approx([2 * p[0], 2 * p[1], *(3 * p[2:]).tolist()])
    # uniform weights: share 1; all weight on one reply of 2 and spread over 3: (1/2 + 1) / 2
    assert effective_share(group_softmax(zeros, groups), groups) == pytest.approx(1.0)
    one_then_spread = torch.tensor([1.0, 0, 1 / 3, 1 / 3, 1 / 3])
    assert effective_share(one_then_spread, groups) == pytest.approx(0.75)


def test_the_table_critic_takes_the_clipped_step_toward_each_replys_mean_reward():
    assert clipped_step(torch.tensor(0.1), torch.tensor(0.9), 0.5).item() == pytest.approx(0.6)
    assert clipped_step(torch.tensor(0.1), torch.tensor(0.3), 0.5).item() == pytest.approx(0.3)
    table = TableCritic(clip=0.5)
    # rows 0 and 2 are one (prompt, reply), their padding aside; row 1 another
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 8, 9], [5, 6, 7, 0]])
    attention = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
    batch = SimpleNamespace(input_ids=ids, attention_mask=attention)  # what the table reads
    scores, _ = table.fit_and_score(batch, torch.tensor([1.0, 0.2, 0.0]))
    assert scores.tolist() == pytest.approx([0.5, 0.2, 0.5])  # mean 0.5; 0.2
    scores, _ = table.fit_and_score(batch, torch.tensor([1.0, 1.0, 1.0]))
    assert scores.tolist() == pytest.approx([1.0, 0.7, 1.0])  # 0.5 + 0.5; 0.2 + clip(0.8)


@pytest.mark.parametrize(
    "override, fix",
    [
        ("algo.kl_coef=0.01", "algo.kl_coef=0"),
        ("algo.tis=token", "algo.tis=off"),
        ("algo.loss=ppo_clip", "algo.loss=reinforce"),
        ("algo.loss_agg=token-mean", "seq-mean-token-sum"),
        ("algo.advantage=gae", "other than gae"),
        ("rollout.group_size=1", "group_size >= 2"),
    ],
)
def test_settings_that_would_change_the_target_are_refused(override, fix):
    base = ["algo.loss=reinforce", "algo.loss_agg=seq-mean-token-sum", "algo.kl_coef=0"]
    cfg = load_config(None, [*base, override])
    with pytest.raises(ConfigError, match=fix):
        HierarchicalActorCritic.check(Params(), cfg, None)
    HierarchicalActorCritic.check(Params(), load_config(None, base), None)  # the fixed config


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")  # right half the time: most groups are mixed


def test_a_step_fits_the_critic_first_and_trains_on_the_projection(fast_overrides, monkeypatch):
    monkeypatch.setitem(REWARDS, "numeric", parity)  # the arithmetic task's verifier
    method = [
        "algo.loss=reinforce", "algo.loss_agg=seq-mean-token-sum", "algo.kl_coef=0",
        "methods.hierarchical.beta=0.1", "train.steps=2",
    ]  # fmt: skip
    trainer = Trainer(load_config(None, fast_overrides + method))
    hierarchical = trainer.methods.chosen["hierarchical"]
    critic_before = hierarchical.critic.critic.model.head.weight.clone()
    received, update = [], trainer.updater.update

    def spy(model, data, *rest):
        received.append((data.advantages.clone(), data.batch))
        return update(model, data, *rest)

    trainer.updater.update = spy
    metrics = trainer.step()
    assert not torch.equal(critic_before, hierarchical.critic.critic.model.head.weight)
    assert {"hierarchical/target_share", "critic/value_loss", "time/critic"} <= metrics.keys()
    advantages, batch = received[0]
    mask = batch.loss_mask.bool()
    per_reply = advantages.sum(-1) / batch.loss_mask.sum(-1)
    # one advantage on every token of a reply, nothing off the reply
    assert torch.allclose(advantages[mask], per_reply[:, None].expand_as(advantages)[mask])
    assert (advantages[~mask] == 0).all()
    for group in batch.group_ids.unique():  # n p sums to n in each group
        rows = batch.group_ids == group
        assert float(per_reply[rows].sum()) == pytest.approx(int(rows.sum()), abs=1e-4)
    assert (per_reply >= 0).all()
