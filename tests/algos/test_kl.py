import math

import pytest
import torch

from rlvr.algos.kl import KL_ESTIMATORS, k1, k3

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
