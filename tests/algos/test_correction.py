import math

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
