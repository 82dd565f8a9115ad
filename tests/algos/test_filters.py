import torch

from rlvr.algos.filters import varied_groups


def test_varied_groups_keeps_only_groups_with_different_rewards():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 7, 7, 3, 3])  # ids need not be contiguous
    assert varied_groups(rewards, groups).tolist() == [
        False,
        False,
        True,
        True,
        False,
        False,
        False,
        False,
    ]


def test_varied_groups_on_an_empty_batch():
    assert varied_groups(torch.tensor([]), torch.tensor([], dtype=torch.long)).tolist() == []
