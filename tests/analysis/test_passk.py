from itertools import combinations

import pytest

from rlvr.analysis.passk import pass_at_k


def brute_force(n, c, k):
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12), (n, c, k)


def test_edge_cases():
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 3) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


@pytest.mark.parametrize("k", [0, 6, -1])
def test_invalid_k_raises(k):
    with pytest.raises(ValueError, match="k="):
        pass_at_k(5, 2, k)
