"""RFPO's reward from a frozen critic (arXiv 2609.37119): a reply passes when its value clears the
baseline of its length decile and class (finished or cut off) by a threshold calibrated against
the verifier on held-out rollouts."""

from __future__ import annotations

from dataclasses import dataclass

import torch

DECILES = torch.arange(1, 10, dtype=torch.float64) / 10


def length_cells(
    lengths: torch.Tensor, truncated: torch.Tensor, edges: torch.Tensor
) -> torch.Tensor:
    """[N] cell of each reply: its length decile (from `edges`, the 9 inner decile bounds of the
    calibration set's lengths) times 2, plus 1 when it was cut off by the token budget."""
    decile = torch.bucketize(lengths.double(), edges.double(), right=True)
    return decile * 2 + truncated.long()


@dataclass
class Calibration:
    """What turns a value into a verdict: decile bounds, a baseline per cell, the threshold."""

    edges: list[float]  # 9 inner decile bounds of reply lengths
    baselines: list[float]  # 20 cells: mean value of the calibration replies in each
    tau: float
    agreement: float  # share of calibration replies whose verdict matched the verifier's
    # P(a right reply's margin > a wrong one's), ties half: how well the critic separates them
    # at any threshold (0.5: not at all, or a calibration set of one class)
    auc: float

    @classmethod
    def fit(
        cls,
        values: torch.Tensor,
        lengths: torch.Tensor,
        truncated: torch.Tensor,
        labels: torch.Tensor,
    ) -> Calibration:
        """Baselines and the threshold that best agree with the verifier's `labels` [N] (bool) on
        these replies' final values [N]; a cell without replies takes the overall mean."""
        values = values.double()
        edges = torch.quantile(lengths.double(), DECILES)
        cells = length_cells(lengths, truncated, edges)
        counts = torch.bincount(cells, minlength=20).double()
        sums = torch.bincount(cells, weights=values, minlength=20)
        baselines = torch.where(counts > 0, sums / counts.clamp(min=1), values.mean())
        margins = values - baselines[cells]
        # a threshold below every margin, one between each pair of neighbours, one above all
        ordered = margins.unique()
        between = (ordered[1:] + ordered[:-1]) / 2
        candidates = torch.cat([ordered[:1] - 1, between, ordered[-1:] + 1])
        agreement = ((margins[None] > candidates[:, None]) == labels.bool()[None]).double().mean(1)
        best = int(agreement.argmax())  # the first of equals: the lowest such threshold
        return cls(edges.tolist(), baselines.tolist(), float(candidates[best]),
                   float(agreement[best]), separation(margins, labels.bool()))  # fmt: skip

    def verdicts(
        self, values: torch.Tensor, lengths: torch.Tensor, truncated: torch.Tensor
    ) -> torch.Tensor:
        """[N] 1.0 where a reply's value clears its cell's baseline by more than tau, else 0.0."""
        cells = length_cells(lengths, truncated, torch.tensor(self.edges))
        margins = values.double() - torch.tensor(self.baselines, dtype=torch.float64)[cells]
        return (margins > self.tau).float()


def separation(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """The ROC AUC of `scores` [N] for boolean `labels` [N]: the chance that a positive outscores
    a negative, ties counted half; 0.5 when either class is empty."""
    positive, negative = scores[labels], scores[~labels]
    if not len(positive) or not len(negative):
        return 0.5
    wins = (positive[:, None] > negative[None]).double() + 0.5 * (
        positive[:, None] == negative[None]
    )
    return float(wins.mean())
