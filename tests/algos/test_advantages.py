import math

import pytest
import torch

from rlvr.algos.advantages import ADVANTAGES, AdvInputs, group_stats, grpo
from rlvr.config import AlgoConfig

EPS = 1e-6  # grpo divides by (std + 1e-6)


def inputs(rewards, group_ids, mask=None):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.ones(len(rewards), 3) if mask is None else torch.tensor(mask, dtype=torch.float32)
    return AdvInputs(rewards, torch.tensor(group_ids), mask)


def per_seq(adv):
    return adv[:, 0].double()


def test_grpo_golden_one_group():
    # rewards [1,0,0,1]: mean 0.5, deviations +-0.5, sum of squares 1,
    # unbiased var 1/3, std sqrt(1/3) -> adv = +-0.5 / sqrt(1/3) = +-0.8660
    adv = grpo(inputs([1, 0, 0, 1], [0, 0, 0, 0]), AlgoConfig())
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    torch.testing.assert_close(
        per_seq(adv), torch.tensor([a, -a, -a, a], dtype=torch.float64), atol=1e-6, rtol=0
    )


def test_grpo_golden_uneven_rewards():
    # rewards [3,1,0,0]: mean 1, deviations [2,0,-1,-1], sum sq 6, var 6/3 = 2, std sqrt(2)
    adv = grpo(inputs([3, 1, 0, 0], [5, 5, 5, 5]), AlgoConfig())
    s = math.sqrt(2) + EPS
    expected = torch.tensor([2 / s, 0, -1 / s, -1 / s], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected, atol=1e-6, rtol=0)


def test_grpo_mean_only():
    adv = grpo(inputs([3, 1, 0, 0], [0, 0, 0, 0]), AlgoConfig(normalize_std=False))
    torch.testing.assert_close(
        per_seq(adv), torch.tensor([2.0, 0, -1, -1], dtype=torch.float64), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, 0.7, 1 / 3])
@pytest.mark.parametrize("n", [2, 3, 7, 16])
def test_grpo_equal_rewards_give_exact_zero(value, n):
    adv = grpo(inputs([value] * n, [0] * n), AlgoConfig())
    assert torch.equal(adv, torch.zeros(n, 3))


def test_grpo_interleaved_groups():
    # group 7 at rows 0,2,4: [1,2,0] -> mean 1, dev [0,1,-1], var 2/2 = 1, std 1
    # group 3 at rows 1,3,5: [0,4,2] -> mean 2, dev [-2,2,0], var 8/2 = 4, std 2
    adv = grpo(inputs([1, 0, 2, 4, 0, 2], [7, 3, 7, 3, 7, 3]), AlgoConfig())
    s7, s3 = 1 + EPS, 2 + EPS
    expected = torch.tensor([0, -2 / s3, 1 / s7, 2 / s3, -1 / s7, 0], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected, atol=1e-6, rtol=0)


def test_grpo_zero_off_mask_and_broadcast_on_it():
    mask = [[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1], [1, 1, 1, 1]]
    adv = grpo(inputs([1, 0, 0, 1], [0, 0, 0, 0], mask), AlgoConfig())
    m = torch.tensor(mask, dtype=torch.bool)
    assert adv.shape == (4, 4)
    assert torch.all(adv[~m] == 0)
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    for row, sign in enumerate([1, -1, -1, 1]):
        vals = adv[row][m[row]].double()
        torch.testing.assert_close(vals, torch.full_like(vals, sign * a), atol=1e-6, rtol=0)


def test_group_stats_matches_loop_reference():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(40, generator=gen, dtype=torch.float64)
    group_ids = torch.randint(0, 6, (40,), generator=gen) * 11
    means, stds = group_stats(values, group_ids)
    for i in range(40):
        group = values[group_ids == group_ids[i]]
        assert means[i].item() == pytest.approx(group.mean().item(), abs=1e-12)
        expected_std = group.std(unbiased=True).item() if len(group) > 1 else 0.0
        assert stds[i].item() == pytest.approx(expected_std, abs=1e-12)


def test_group_stats_singleton_group_has_zero_std():
    _, stds = group_stats(torch.tensor([5.0, 1.0, 2.0]), torch.tensor([0, 1, 1]))
    assert stds[0].item() == 0.0


def test_grpo_needs_groups_of_two_and_is_registered():
    assert grpo.min_group_size == 2
    assert ADVANTAGES["grpo"] is grpo
