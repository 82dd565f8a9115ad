import math

import pytest
import torch

from rlvr.algos.shaping import (
    elliptical_bonus,
    group_zscores,
    jaccard,
    overlong_penalty,
    parallel_bonus,
    repeated_turns,
    repetition_offsets,
    repetition_penalties,
    time_rewards,
    turn_texts,
)
from rlvr.types import Batch, Problem, Trajectory


def test_overlong_penalty_golden():
    lengths = torch.tensor([10, 12, 14, 16, 20])
    # budget 16, window 4: free up to 12, then -(L-12)/4, capped at -1 (DAPO eq. 13)
    assert overlong_penalty(lengths, 16, 4, 1.0).tolist() == [0.0, 0.0, -0.5, -1.0, -1.0]
    assert overlong_penalty(lengths, 16, 4, 0.5).tolist() == [0.0, 0.0, -0.25, -0.5, -0.5]
    assert overlong_penalty(lengths, 16, 0, 1.0).tolist() == [0.0] * 5


@pytest.mark.parametrize(
    "timing, expected",
    [("per_turn", [0.1, 0.0, 1.0]), ("delayed", [0.0, 0.0, 1.1]), ("terminal", [0.0, 0.0, 1.0])],
)
def test_reward_timing_moves_turn_rewards(timing, expected):
    assert time_rewards([0.1, 0.0, 1.0], timing) == pytest.approx(expected)
    assert time_rewards([0.5], timing) == [0.5]


# ---- River's repetition penalty ----

WORDS = ["<sep>", "find", "ls", "a.txt", "b.txt", "cat", "empty", "code", "42", "submit"]
SEP = 0  # stands in for the chat template's special tokens between turns


def decode(ids: list[int]) -> str:
    """Word-level decoding that drops the template token, as skip_special_tokens does."""
    return " ".join(WORDS[i] for i in ids if i != SEP)


def episode(turns: list[tuple[str, str]]) -> Trajectory:
    """A trajectory of `turns` (action, observation) after a one-token prompt, each observation
    opened by a template token; the last turn's observation is not inserted (the episode ended)."""
    ids, mask, ends = [WORDS.index("find")], [0], []
    for k, (action, observation) in enumerate(turns):
        ids += [WORDS.index(w) for w in action.split()]
        mask += [1] * len(action.split())
        ends.append(len(ids))
        if k + 1 < len(turns):
            inserted = [SEP] + [WORDS.index(w) for w in observation.split()]
            ids, mask = ids + inserted, mask + [0] * len(inserted)
    problem = Problem(id="p", prompt="find the code")
    return Trajectory(problem, 0, 0, ids, mask, [0.0] * len(ids), [0.0] * len(turns), ends, "ok")


LOOPY = [
    ("ls", "a.txt b.txt"),  # tokens 1 | 2-4
    ("cat a.txt", "empty"),  # 5-6 | 7-8
    ("ls", "a.txt b.txt"),  # 9: repeats turn 0 -> -0.05
    ("cat a.txt", "empty"),  # 13-14: repeats turn 1 -> -0.05
    ("cat b.txt", "code 42"),  # 17-18: new (Jaccard of the actions 1/3)
    ("ls", "a.txt b.txt"),  # 22: repeats turn 0 -> -0.05, the total reaches the 0.15 cap
    ("ls", "a.txt b.txt"),  # 26: repeats, but capped -> 0
    ("submit 42", ""),  # 30-31
]


def test_jaccard_is_over_whitespace_words():
    assert jaccard("cat a.txt", "cat  b.txt") == pytest.approx(1 / 3)
    assert jaccard("ls -la", "ls -la\n") == 1.0
    assert jaccard("", "") == 1.0 and jaccard("ls", "") == 0.0


def test_turn_texts_split_actions_from_what_the_env_inserted():
    texts = turn_texts(episode(LOOPY), decode)
    assert texts[:2] == [("ls", "a.txt b.txt"), ("cat a.txt", "empty")]
    assert texts[-1] == ("submit 42", "")


def test_repeated_turns_need_both_action_and_observation_above_the_threshold():
    assert repeated_turns(turn_texts(episode(LOOPY), decode), 0.8) == [
        False, False, True, True, False, True, True, False,
    ]  # fmt: skip
    # the same command with a different result is no loop
    assert repeated_turns([("ls", "a b"), ("ls", "a c")], 0.8) == [False, False]
    # strictly above: 4 shared words of 5 is exactly 0.8
    same = [("a b c d e", "x"), ("a b c d", "x")]
    assert repeated_turns(same, 0.8) == [False, False]
    assert repeated_turns(same, 0.75) == [False, True]


def test_repetition_penalties_stop_at_the_cap():
    offsets = repetition_penalties([False, True, True, False, True, True], 0.05, 0.15)
    assert offsets == pytest.approx([0, -0.05, -0.05, 0, -0.05, 0], abs=1e-12)
    assert repetition_penalties([True, True], 0.1, 0.15) == pytest.approx([-0.1, -0.05])


def test_repetition_offsets_land_on_the_repeated_turns_policy_tokens():
    trajectory = episode(LOOPY)
    batch = Batch.from_trajectories([trajectory], pad_id=SEP)
    offsets, share = repetition_offsets([trajectory], batch.turn_ids, decode, 0.8, 0.05, 0.15)
    # Batch columns are shifted: column t holds token t + 1
    expected = torch.zeros(1, len(trajectory.token_ids) - 1)
    expected[0, [9 - 1, 13 - 1, 14 - 1, 22 - 1]] = -0.05
    assert torch.allclose(offsets, expected, atol=1e-12)
    assert share == pytest.approx(4 / 8)


def test_single_turn_episodes_get_no_offset():
    trajectories = [episode([("ls", "")]), episode([("ls", "")]), episode([("cat a.txt", "")])]
    batch = Batch.from_trajectories(trajectories, pad_id=SEP)
    offsets, share = repetition_offsets(trajectories, batch.turn_ids, decode, 0.8, 0.05, 0.15)
    assert torch.all(offsets == 0) and share == 0.0


def test_elliptical_bonus_is_the_leverage_within_the_group():
    # one group of 2 in 1-D: centred -1 and 1, Sigma = 0.5 + 2, leverage 1 / 2.5 each; the other
    # group, 3 in 2-D around (2/3, 1), was worked by hand: Sigma = [[11/3, -2], [-2, 7]] (lam 1)
    one_d = elliptical_bonus(
        torch.tensor([[1.0], [3.0]]), torch.tensor([0, 0]), torch.tensor([True, False]), lam=0.5
    )
    assert one_d.tolist() == pytest.approx([0.4, 0.4])
    two_d = elliptical_bonus(
        torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]]), torch.tensor([5, 5, 5]),
        torch.tensor([False, False, True]), lam=1.0,
    )  # fmt: skip
    assert float(two_d[0]) == pytest.approx(17 / 39)


def test_elliptical_leave_one_out_inverts_sigma_without_the_rollout():
    features = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    groups, correct = torch.tensor([0, 0, 0, 1, 1, 1]), torch.ones(6, dtype=torch.bool)
    bonus = elliptical_bonus(features, groups, correct, lam=0.1, leave_one_out=True)
    for i in range(6):
        h = features[groups == groups[i]].double()
        h = h - h.mean(0)
        row = features[i].double() - features[groups == groups[i]].double().mean(0)
        sigma = 0.1 * torch.eye(3, dtype=torch.float64) + h.T @ h - torch.outer(row, row)
        assert float(bonus[i]) == pytest.approx(float(row @ torch.linalg.inv(sigma) @ row))


def test_elliptical_bonus_favours_the_odd_one_out_and_skips_groups_with_nothing_right():
    features = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]] * 2)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    correct = torch.tensor([True] * 4 + [False] * 4)
    bonus = elliptical_bonus(features, groups, correct, lam=0.01)
    assert bonus[3] > bonus[0] == bonus[1] == bonus[2] > 0  # the one unlike its siblings
    assert bonus[4:].tolist() == [0.0] * 4  # no correct rollout in group 1


def test_group_zscores_use_the_population_std_and_zero_a_constant_group():
    values = torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0])
    z = group_zscores(values, torch.tensor([0, 0, 0, 1, 1]))
    std = math.sqrt(2 / 3)  # of 1, 2, 3 about their mean 2
    assert torch.allclose(z, torch.tensor([-1 / std, 0.0, 1 / std, 0.0, 0.0], dtype=z.dtype))


def test_parallel_bonus_by_hand():
    acceleration = torch.tensor([1.5, 1.0, 1.1, 1.3])
    structure = torch.tensor([[0.4, 0.0, 0.4], [0.0, 0.0, 0.0], [0.2, 0.1, 0.3], [0.5, 0.0, 0.5]])
    correct, groups = torch.tensor([True, True, False, True]), torch.tensor([0, 0, 0, 1])
    bonus = parallel_bonus(acceleration, structure, correct, groups, 0.5, 0.2, (0.05, 0, 0), 0.1)
    # group 0: accelerations 1.5, 1.0, 1.1 (mean 1.2), subtask shares 0.4, 0, 0.2 (mean 0.2)
    accel_std, subtask_std = math.sqrt((0.09 + 0.04 + 0.01) / 3), math.sqrt(0.08 / 3)
    first = 0.5 * 0.2 + 0.05 * 0.2 / subtask_std + 0.1 * 0.3 / accel_std  # capped at 0.2
    second = 0.5 * 0.0 - 0.05 * 0.2 / subtask_std - 0.1 * 0.2 / accel_std
    # the wrong rollout gets nothing; the lone rollout of group 1 has no spread to score
    expected = torch.tensor([first, second, 0.0, 0.5 * 0.2], dtype=torch.float64)
    assert torch.allclose(bonus, expected)
    assert second < 0  # a slower correct sibling is pushed below its group
