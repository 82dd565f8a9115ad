import torch

from rlvr.algos.filters import consistent_verifiers, solved_within, usable_samples, varied_groups


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


def test_usable_samples_drop_infra_errors_and_groups_left_too_small():
    group_ids = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    infra = torch.tensor([False, True, False, True, False, False, False])
    assert usable_samples(infra, group_ids).tolist() == [1, 0, 1, 0, 1, 1, 1]
    # group 1 keeps one sample, fewer than 2: dropped whole
    assert usable_samples(infra, group_ids, 2).tolist() == [1, 0, 1, 0, 0, 1, 1]
    assert usable_samples(torch.ones(3, dtype=torch.bool), torch.tensor([0, 0, 1])).sum() == 0


def test_solved_within_counts_only_the_first_k_tries():
    correct = torch.tensor([[0, 0, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    assert solved_within(correct, 2).tolist() == [False, True, False]
    assert solved_within(correct, 3).tolist() == [True, True, False]


def test_consistent_verifiers_accept_the_reference_and_reject_every_probe():
    reference = torch.tensor([True, False, True, True])
    probes = torch.tensor([[False, False], [False, False], [True, False], [False, True]])
    # 1 rejects its own reference; 2 accepts an empty reply; 3 accepts another problem's answer
    assert consistent_verifiers(reference, probes).tolist() == [True, False, False, False]
