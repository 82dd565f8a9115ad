"""Each Tinker loss, as rlvr serves it, against its formula in Tinker's docs computed by hand."""

import pytest
import torch

from rlvr.serve.losses import TINKER_LOSSES, Batch, settings

# two datums of 3 positions; the second has 2 (its last position is padding)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
SAMPLED = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.2, 0.0]])  # q, the sampler's logprobs
ADV = torch.tensor([[1.0, -1.0, 2.0], [-0.5, 1.5, 0.0]])
WEIGHTS = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.5, 0.0]])
NOW = torch.tensor([[-0.7, -2.5, -0.45], [-1.0, -0.3, -9.0]])  # log p under the policy


def run(name, config=None):
    cfg = settings(name, config)
    logprobs = NOW.clone().requires_grad_(True)
    inputs = {"logprobs": SAMPLED, "advantages": ADV, "weights": WEIGHTS}
    loss = TINKER_LOSSES[name](logprobs, Batch(MASK, inputs), cfg)
    loss.backward()
    return float(loss.detach()), logprobs.grad


def reference(name, config=None):
    """Tinker's per-token formulas, summed over the datums' positions."""
    logp = NOW.clone().requires_grad_(True)
    ratio = torch.exp(logp - SAMPLED)
    cfg = settings(name, config)
    if name == "cross_entropy":
        per_token = -WEIGHTS * logp
    elif name == "importance_sampling":
        per_token = -ratio * ADV
    elif name == "ppo":
        clipped = ratio.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"])
        per_token = -torch.minimum(ratio * ADV, clipped * ADV)
    elif name == "cispo":
        clipped = ratio.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"]).detach()
        per_token = -clipped * logp * ADV
    else:  # dro
        per_token = -(logp * ADV - 0.5 * cfg["beta"] * (logp - SAMPLED) ** 2)
    loss = (per_token * MASK).sum()
    loss.backward()
    return float(loss.detach()), logp.grad


@pytest.mark.parametrize(
    "name, config",
    [
        ("cross_entropy", None),
        ("importance_sampling", None),
        ("ppo", None),
        ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}),
        ("cispo", None),
        ("dro", {"beta": 0.3}),
    ],
)
def test_loss_and_gradient_match_tinker_formula(name, config):
    loss, grad = run(name, config)
    want_loss, want_grad = reference(name, config)
    assert loss == pytest.approx(want_loss, rel=1e-6)
    torch.testing.assert_close(grad, want_grad)


def test_ppo_clip_binds_in_this_example():
    """The example reaches both clip edges, so the ppo case above tests the clip itself."""
    ratio = torch.exp(NOW - SAMPLED)[MASK.bool()]
    assert (ratio > 1.2).any() and (ratio < 0.8).any()
    assert run("ppo")[0] != pytest.approx(run("importance_sampling")[0])


def test_cross_entropy_by_hand():
    # -(1 * -2.5 + 1 * -0.45 + 1 * -1.0 + 0.5 * -0.3): the weights pick the positions
    assert run("cross_entropy")[0] == pytest.approx(2.5 + 0.45 + 1.0 + 0.15)


@pytest.mark.parametrize(
    "name, config, message",
    [
        ("sft", None, "unknown loss_fn 'sft'"),
        ("gspo", None, "not served by rlvr"),
        ("ppo", {"beta": 1.0}, "not settings of 'ppo'"),
        ("ppo", {"clip_low_threshold": 1.3}, "clip_low_threshold <= 1"),
    ],
)
def test_bad_loss_requests_are_refused_by_name(name, config, message):
    with pytest.raises(ValueError, match=message):
        run(name, config)
