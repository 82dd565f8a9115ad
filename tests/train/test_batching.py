import torch

from rlvr.train.batching import by_length


def test_a_prompts_rows_stay_together_longest_prompt_group_first():
    lengths = torch.tensor([5, 9, 4, 7, 8, 3])
    units = torch.tensor([0, 1, 0, 1, 2, 2])
    assert by_length(torch.arange(6), lengths, units).tolist() == [1, 3, 4, 5, 0, 2]
    assert by_length(torch.arange(6), lengths).tolist() == [1, 4, 3, 0, 2, 5]
