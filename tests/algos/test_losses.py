import math

import pytest
import torch

from rlvr.algos.losses import LOSSES, LossInputs, ppo_clip
from rlvr.config import AlgoConfig

ALGO = AlgoConfig(clip_low=0.2, clip_high=0.28)

# (advantage, ratio, expected per-token loss, clipped?) with bounds [0.8, 1.28]
CASES = [
    (1.0, 1.10, -1.10, False),  # inside
    (1.0, 1.50, -1.28, True),  # A>0 above 1+clip_high: clipped
    (1.0, 0.50, -0.50, False),  # A>0 below 1-clip_low: pessimistic min keeps the ratio
    (-1.0, 0.50, 0.80, True),  # A<0 below 1-clip_low: clipped
    (-1.0, 1.50, 1.50, False),  # A<0 above 1+clip_high: unclipped
    (-2.0, 0.90, 1.80, False),  # inside
    (1.0, 1.25, -1.25, False),  # inside only because clip_high=0.28 (would clip at 0.2)
    (-1.0, 0.78, 0.80, True),  # clipped only because clip_low=0.2 (would pass at 0.28)
]
# sum = -1.1 - 1.28 - 0.5 + 0.8 + 1.5 + 1.8 - 1.25 + 0.8 = 0.77 over 8 tokens


def golden_inputs():
    adv = torch.zeros(2, 5, dtype=torch.float64)
    ratio = torch.ones(2, 5, dtype=torch.float64)
    mask = torch.zeros(2, 5, dtype=torch.float64)
    slots = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3), (1, 4)]
    for (a, r, _, _), (i, j) in zip(CASES, slots):
        adv[i, j], ratio[i, j], mask[i, j] = a, r, 1.0
    adv[0, 4], ratio[0, 4] = 100.0, 50.0  # masked out
    adv[1, 0], ratio[1, 0] = -100.0, 0.01  # masked out
    old = torch.linspace(-3, -0.5, 10, dtype=torch.float64).reshape(2, 5)
    return LossInputs(old + ratio.log(), old, adv, mask, num_tokens=8.0, num_seqs=2)


def test_ppo_clip_golden():
    out = ppo_clip(golden_inputs(), ALGO)
    assert out.loss.item() == pytest.approx(sum(c[2] for c in CASES) / 8, abs=1e-9)
    assert out.loss.item() == pytest.approx(0.77 / 8, abs=1e-9)
    assert out.metrics["clip_frac"] == pytest.approx(3 / 8)


def test_ppo_kl_metric():
    x = golden_inputs()
    expected = -sum(math.log(c[1]) for c in CASES) / 8
    assert ppo_clip(x, ALGO).metrics["ppo_kl"] == pytest.approx(expected, abs=1e-9)


def test_token_mean_halves_sum_to_whole():
    x = golden_inputs()
    whole = ppo_clip(x, ALGO)
    halves = [
        ppo_clip(
            LossInputs(
                x.logprobs[i : i + 1],
                x.old_logprobs[i : i + 1],
                x.advantages[i : i + 1],
                x.loss_mask[i : i + 1],
                num_tokens=x.num_tokens,
                num_seqs=x.num_seqs,
            ),
            ALGO,
        )
        for i in range(2)
    ]
    assert (halves[0].loss + halves[1].loss).item() == pytest.approx(whole.loss.item(), abs=1e-12)
    for key in whole.metrics:
        assert halves[0].metrics[key] + halves[1].metrics[key] == pytest.approx(
            whole.metrics[key], abs=1e-12
        )


def test_gradcheck_away_from_clip_boundaries():
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=gen, dtype=torch.float64) * 3
    log_ratio = torch.tensor(
        [[0.05, -0.1, 0.6, -0.7], [0.0, 0.15, -0.05, 0.5], [-0.5, 0.1, 0.2, -0.15]],
        dtype=torch.float64,
    )
    adv = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 1], [1, 0, 1, 1]], dtype=torch.float64)
    logprobs = (old + log_ratio).requires_grad_()

    def f(lp):
        return ppo_clip(LossInputs(lp, old, adv, mask, num_tokens=10.0, num_seqs=3), ALGO).loss

    assert torch.autograd.gradcheck(f, (logprobs,))


def test_gradient_is_zero_where_clipped_and_masked():
    x = golden_inputs()
    logprobs = x.logprobs.clone().requires_grad_()
    ppo_clip(
        LossInputs(logprobs, x.old_logprobs, x.advantages, x.loss_mask, 8.0, 2), ALGO
    ).loss.backward()
    g = logprobs.grad
    assert g[0, 1] == 0 and g[0, 3] == 0 and g[1, 4] == 0  # clipped
    assert g[0, 4] == 0 and g[1, 0] == 0  # masked
    # inside the clip range d(-A*r)/dlogp = -A*r, divided by the 8 tokens
    assert g[0, 0].item() == pytest.approx(-1.1 / 8)
    assert g[1, 2].item() == pytest.approx(2 * 0.9 / 8)


def test_fully_masked_input_gives_zero_loss():
    logprobs = torch.randn(2, 3, requires_grad=True)
    x = LossInputs(
        logprobs,
        torch.randn(2, 3),
        torch.randn(2, 3),
        torch.zeros(2, 3),
        num_tokens=0.0,
        num_seqs=2,
    )
    out = ppo_clip(x, AlgoConfig())
    assert torch.isfinite(out.loss) and out.loss.item() == 0.0
    out.loss.backward()
    assert torch.all(logprobs.grad == 0)
    assert out.metrics["clip_frac"] == 0.0


def test_registered():
    assert LOSSES["ppo_clip"] is ppo_clip
