"""RFPO's calibration and verdicts on hand-computed cases."""

import pytest
import torch

from rlvr.algos.critic_reward import Calibration, length_cells, separation


def test_cells_are_length_deciles_split_by_whether_the_reply_was_cut_off():
    edges = torch.tensor([10.0, 20, 30, 40, 50, 60, 70, 80, 90])
    lengths = torch.tensor([5, 10, 45, 95, 95])
    truncated = torch.tensor([False, False, True, False, True])
    # a length equal to a bound belongs to the decile above it
    assert length_cells(lengths, truncated, edges).tolist() == [0, 2, 9, 18, 19]


def test_calibration_centres_each_cell_and_finds_the_threshold_that_agrees_best():
    values = torch.tensor([0.9, 0.8, 0.2, 0.6, 0.1, 0.7])
    lengths = torch.full((6,), 12)  # every decile bound is 12: all replies in the top decile
    truncated = torch.tensor([False, False, False, True, True, True])
    labels = torch.tensor([True, True, False, False, False, True])
    fit = Calibration.fit(values, lengths, truncated, labels)
    finished, cut = (0.9 + 0.8 + 0.2) / 3, (0.6 + 0.1 + 0.7) / 3
    assert fit.baselines[18] == pytest.approx(finished) and fit.baselines[19] == pytest.approx(cut)
    # empty cells take the overall mean
    assert fit.baselines[0] == pytest.approx(values.double().mean().item())
    # margins: 0.267 0.167 -0.433 | 0.133 -0.367 0.233; labels split them between 0.133 and 0.167
    assert fit.tau == pytest.approx((0.6 - cut + 0.8 - finished) / 2)
    assert fit.agreement == 1.0 and fit.auc == 1.0  # every right reply's margin is higher
    verdicts = fit.verdicts(torch.tensor([0.8, 0.7, 0.5]), torch.tensor([12, 12, 12]),
                            torch.tensor([False, False, True]))  # fmt: skip
    # margins 0.167, 0.067 (finished) and 0.033 (cut off) against tau 0.15
    assert verdicts.tolist() == [1.0, 0.0, 0.0]


def test_calibration_reports_the_agreement_a_threshold_cannot_improve():
    values = torch.tensor([0.1, 0.2, 0.3, 0.4])
    lengths, truncated = torch.full((4,), 5), torch.zeros(4, dtype=torch.bool)
    labels = torch.tensor([False, True, False, True])  # no single threshold separates them
    fit = Calibration.fit(values, lengths, truncated, labels)
    # margins -0.15 -0.05 0.05 0.15: thresholds between the first two or the last two agree on 3
    # of 4; the lowest such is taken
    assert fit.agreement == 0.75 and fit.tau == pytest.approx(-0.1)
    assert fit.auc == 0.75  # of the 4 (right, wrong) pairs, the right one is higher in 3


def test_when_every_reply_failed_the_threshold_passes_none():
    values = torch.tensor([0.0, 0.0, 0.0])
    lengths, truncated = torch.full((3,), 5), torch.zeros(3, dtype=torch.bool)
    fit = Calibration.fit(values, lengths, truncated, torch.zeros(3, dtype=torch.bool))
    assert fit.agreement == 1.0 and fit.tau == 1.0 and fit.auc == 0.5  # one class: no ranking
    assert fit.verdicts(values, lengths, truncated).tolist() == [0.0, 0.0, 0.0]


def test_separation_counts_ties_as_half():
    scores = torch.tensor([0.3, 0.3, 0.1, 0.5])
    labels = torch.tensor([True, False, False, True])
    # pairs (right, wrong): (0.3, 0.3) tie, (0.3, 0.1) win, (0.5, 0.3) win, (0.5, 0.1) win
    assert separation(scores, labels) == pytest.approx(3.5 / 4)
