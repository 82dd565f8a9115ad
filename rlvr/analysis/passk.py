"""The unbiased pass@k estimator (Chen et al., 2021)."""

from __future__ import annotations

from math import comb


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n is correct:
    1 - C(n - c, k) / C(n, k)."""
    if not 0 < k <= num_samples:
        raise ValueError(f"pass@k needs 0 < k <= n samples, got k={k}, n={num_samples}")
    if num_samples - num_correct < k:
        return 1.0
    return 1.0 - comb(num_samples - num_correct, k) / comb(num_samples, k)
