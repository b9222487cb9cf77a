"""pairkit.core.unique.sorted_unique against np.unique."""

from __future__ import annotations

import numpy as np

from pairkit.core.unique import sorted_unique


def test_sorted_unique_equals_numpy_unique() -> None:
    rng = np.random.default_rng(0)
    for values in (rng.integers(-5, 5, 1000), rng.integers(0, 1 << 40, 5000),
                   rng.integers(0, 3, (40, 7)), np.array([7, 7, 7]), np.array([3]),
                   np.zeros(0, np.int64)):
        got = sorted_unique(values)
        want = np.unique(values)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert sorted_unique(np.array([3, 1, 2, 1, 3])).tolist() == [1, 2, 3]
