import math

import pytest
import torch

from rlvr.algos.correction import mismatch_metrics, truncated_is_weights


def test_token_and_sequence_weights_golden():
    train = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]])
    behaviour = torch.tensor([[-1.5, -1.0, 0.0], [-0.5, -1.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # token ratios: e^0.5=1.6487, e^-1=0.3679 | 1, e^0.5, 1  -> cap 1.5 truncates the e^0.5 ones
    w, metrics = truncated_is_weights(train, behaviour, mask, "token", cap=1.5)
    expected = torch.tensor([[1.5, math.exp(-1), 0.0], [1.0, 1.5, 1.0]])
    assert torch.allclose(w, expected, atol=1e-6)
    assert abs(metrics["mismatch/truncated_share"] - 2 / 5) < 1e-6
    # sequence: row 0 sums to -0.5 -> e^-0.5 on both tokens; row 1 sums to 0.5 -> capped
    w, _ = truncated_is_weights(train, behaviour, mask, "sequence", cap=1.5)
    expected = torch.tensor([[math.exp(-0.5)] * 2 + [0.0], [1.5] * 3])
    assert torch.allclose(w, expected, atol=1e-6)


def test_sequence_mask_keeps_ratios_inside_the_band_and_drops_the_rest():
    """C3PO: sequence log-ratios 0.5 (kept, e^0.5), 1.0 (e > 2: dropped), -0.9 (e^-0.9 < 0.5:
    dropped), 0.6 (e^0.6 = 1.82, kept); the third sequence's padding stays 0."""
    train = torch.tensor([[-1.0, -1.0], [-0.5, -0.5], [-1.0, 0.0], [-0.2, -0.2]])
    behaviour = torch.tensor([[-1.25, -1.25], [-1.0, -1.0], [-0.1, 0.0], [-0.5, -0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    w, metrics = truncated_is_weights(train, behaviour, mask, "sequence_mask", cap=2.0)
    e5, e6 = math.exp(0.5), math.exp(0.6)
    assert torch.allclose(w, torch.tensor([[e5, e5], [0.0, 0.0], [0.0, 0.0], [e6, e6]]))
    assert metrics["mismatch/masked_share"] == pytest.approx(3 / 7)  # 3 of 7 policy tokens


def test_no_mismatch_means_unit_weights_and_zero_diff():
    lp = torch.randn(3, 5).clamp(max=0)
    mask = torch.ones(3, 5)
    w, metrics = truncated_is_weights(lp, lp, mask, "token", cap=2.0)
    assert torch.equal(w, mask) and metrics["mismatch/truncated_share"] == 0
    m = mismatch_metrics(lp, lp, mask)
    assert m["mismatch/abs_diff_max"] == 0 and m["mismatch/ratio_p50"] == 1


def test_mismatch_metrics_golden():
    train = torch.tensor([[0.0, -1.0, -3.0]])
    behaviour = torch.tensor([[0.0, -1.5, -1.0]])
    m = mismatch_metrics(train, behaviour, torch.tensor([[0.0, 1.0, 1.0]]))
    assert (
        abs(m["mismatch/abs_diff_mean"] - 1.25) < 1e-6
        and abs(m["mismatch/abs_diff_max"] - 2.0) < 1e-6
    )


def bandit(staleness: int, objective: str, lr: float = 1.0, steps: int = 30) -> float:
    """Expected reward of a 16-armed softmax bandit after `steps` PPO updates (4 epochs each) on
    batches sampled by the policy of `staleness` updates ago, as asynchronous RL samples them.

    'decoupled': the clip is centred on the proximal policy (the weights before this update)
    and each token is weighed by the truncated pi_proximal / pi_behaviour (the trainer's
    algo.tis with rollout.max_staleness > 0). 'behaviour': the clip is centred on the sampler's
    own logprobs, with no decoupling."""
    from rlvr.algos.losses import LOSSES, LossInputs
    from rlvr.config import load_config

    algo = load_config(None, []).algo
    g = torch.Generator().manual_seed(0)
    values = torch.linspace(0, 1, 16)  # arm a pays 1 with probability values[a]
    logits = torch.zeros(16, requires_grad=True)
    history = [logits.detach().clone()]
    optimizer = torch.optim.SGD([logits], lr=lr)
    for _ in range(steps):
        behaviour = torch.log_softmax(history[max(0, len(history) - 1 - staleness)], -1)
        actions = torch.multinomial(behaviour.exp(), 512, replacement=True, generator=g)
        rewards = (torch.rand(512, generator=g) < values[actions]).float()
        advantages = ((rewards - rewards.mean()) / (rewards.std() + 1e-6))[:, None]
        behaviour_lp, mask = behaviour[actions][:, None], torch.ones(512, 1)
        proximal = torch.log_softmax(logits.detach(), -1)[actions][:, None]
        for _ in range(4):
            logprobs = torch.log_softmax(logits, -1)[actions][:, None]
            if objective == "decoupled":
                weights, _ = truncated_is_weights(proximal, behaviour_lp, mask, "token", 2.0)
                inputs = LossInputs(logprobs, proximal, advantages * weights, mask, 512, 512)
            else:
                inputs = LossInputs(logprobs, behaviour_lp, advantages, mask, 512, 512)
            optimizer.zero_grad()
            LOSSES["ppo_clip"](inputs, algo).loss.backward()
            optimizer.step()
        history.append(logits.detach().clone())
    return float((torch.softmax(logits.detach(), -1) * values).sum())


def test_stale_samples_need_the_decoupled_objective():
    synchronous = bandit(0, "decoupled")
    assert synchronous > 0.99
    assert bandit(2, "decoupled") == pytest.approx(synchronous, abs=0.01)
    # centred on the stale sampler, the clip zeroes the signal once the policy has moved on
    assert bandit(2, "behaviour") < synchronous - 0.05
