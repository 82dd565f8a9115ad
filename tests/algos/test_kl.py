import math

import pytest
import torch

from rlvr.algos.kl import KL_ESTIMATORS, k1, k3, k3_plus
from rlvr.config import AlgoConfig

PI = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
REF = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
EXACT_KL = float((PI * (PI / REF).log()).sum())  # KL(pi || ref)


def test_k1_golden():
    out = k1(torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-2.0, -1.0, -0.5]))
    torch.testing.assert_close(out, torch.tensor([1.0, -1.0, 0.0]))


def test_k3_golden():
    # r = ref/pi. r=0.5: 0.5 - 1 - ln 0.5 = 0.193147; r=2: 2 - 1 - ln 2 = 0.306853; r=1: 0
    lp = torch.log(torch.tensor([0.5, 0.25, 0.3], dtype=torch.float64))
    ref = torch.log(torch.tensor([0.25, 0.5, 0.3], dtype=torch.float64))
    expected = torch.tensor([-0.5 + math.log(2), 1 - math.log(2), 0.0], dtype=torch.float64)
    torch.testing.assert_close(k3(lp, ref), expected, atol=1e-12, rtol=0)


def test_k3_non_negative_and_finite_on_extremes():
    gen = torch.Generator().manual_seed(0)
    lp = torch.randn(1000, generator=gen) * 10
    ref = torch.randn(1000, generator=gen) * 10
    out = k3(
        torch.cat([lp, torch.tensor([0.0, -80.0])]), torch.cat([ref, torch.tensor([-80.0, 0.0])])
    )
    assert torch.all(out >= 0) and torch.all(torch.isfinite(out))


@pytest.mark.parametrize("name", ["k1", "k3"])
def test_estimator_is_unbiased_exactly(name):
    est = KL_ESTIMATORS[name](PI.log(), REF.log())
    assert float((PI * est).sum()) == pytest.approx(EXACT_KL, abs=1e-12)


@pytest.mark.parametrize("name", ["k1", "k3"])
def test_estimator_monte_carlo(name):
    gen = torch.Generator().manual_seed(0)
    x = torch.multinomial(PI, 200_000, replacement=True, generator=gen)
    est = KL_ESTIMATORS[name](PI.log()[x], REF.log()[x])
    assert float(est.mean()) == pytest.approx(EXACT_KL, abs=0.01)


def test_k3_far_below_the_reference_is_huge_unless_clamped():
    # logp = -14, ref = -2: log r = 12, k3 = e^12 - 1 - 12 = 162741.79, d/dlogp = 1 - e^12
    lp = torch.tensor([-14.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-2.0], dtype=torch.float64)
    out = k3(lp, ref)
    out.backward()
    assert out.item() == pytest.approx(math.exp(12) - 13, abs=1e-6)  # 162741.79
    assert lp.grad.item() == pytest.approx(1 - math.exp(12), abs=1e-6)  # -162753.79
    assert k3(lp, ref, AlgoConfig()).item() == out.item()  # the clamp is off by default
    lp.grad = None
    clamped = k3(lp, ref, AlgoConfig(kl_clamp=10.0))
    clamped.backward()
    assert clamped.item() == 10.0 and lp.grad.item() == 0.0  # held at the clamp: no gradient
    lp.grad = None
    plus = k3_plus(lp, ref, AlgoConfig(kl_clamp=10.0))
    plus.backward()
    assert plus.item() == 10.0 and lp.grad.item() == -12.0  # k2's gradient, log pi - log ref


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # log pi - log ref = [1, -0.5, 0]; k1 = that, abs = |that|, k3 = e^-d - 1 + d
        ("k1+", [1.0, -0.5, 0.0]),
        ("abs+", [1.0, 0.5, 0.0]),
        ("k3+", [math.exp(-1) - 1 + 1, math.exp(0.5) - 1 - 0.5, 0.0]),
    ],
)
def test_straight_through_forms_have_the_named_value_and_k2s_gradient(name, value):
    lp = torch.tensor([-1.0, -2.5, -0.7], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-2.0, -2.0, -0.7], dtype=torch.float64)
    out = KL_ESTIMATORS[name](lp, ref, AlgoConfig())
    torch.testing.assert_close(out, torch.tensor(value, dtype=torch.float64), atol=1e-12, rtol=0)
    out.sum().backward()
    # d k2 / d log pi = log pi - log ref
    torch.testing.assert_close(lp.grad, torch.tensor([1.0, -0.5, 0.0], dtype=torch.float64))


def test_every_estimator_has_a_docstring_and_takes_the_algo():
    lp, ref = torch.tensor([-1.0, -3.0]), torch.tensor([-2.0, -1.0])
    for name, fn in KL_ESTIMATORS.items():
        assert fn.__doc__ and fn.__doc__.strip().splitlines()[0], name
        assert torch.equal(fn(lp, ref), fn(lp, ref, AlgoConfig())), name
