"""pairkit.core.unique.sorted_unique and unique_rows against np.unique."""

from __future__ import annotations

import numpy as np

from pairkit.core.unique import sorted_unique, unique_rows


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


def _same_as_numpy(rows: np.ndarray) -> None:
    want_u, want_i, want_v = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    got_u, got_i, got_v = unique_rows(rows)
    assert got_u.dtype == want_u.dtype and got_u.shape == want_u.shape
    np.testing.assert_array_equal(got_u, want_u)
    np.testing.assert_array_equal(got_i, want_i)  # the first occurrence of each
    np.testing.assert_array_equal(got_v, want_v.reshape(-1))
    np.testing.assert_array_equal(got_u[got_v], rows)


def test_unique_rows_equals_numpy_unique_axis0() -> None:
    rng = np.random.default_rng(1)
    big = np.iinfo(np.int64).max
    cases = [
        rng.integers(0, 50, (2000, 2)),  # many repeats
        rng.integers(-1, 30, (3000, 3)),  # -1 padding among the ids (negatives)
        rng.integers(0, 100_000, (5000, 2)),  # store-sized ids, few repeats
        rng.integers(0, 3_000_000, (4000, 3)),  # N^3 > 2^63: the lexsort path
        rng.integers(-big, big, (500, 2)),  # spans beyond int64: lexsort
        np.array([[big, -big - 1], [big, -big - 1], [-big - 1, big]]),
        rng.integers(0, 1 << 20, (1000, 2)).astype(np.int32),
        rng.integers(0, 5, (300, 2)).astype(np.uint64) + np.uint64(1 << 63),
        np.zeros((0, 2), np.int64), np.zeros((0, 3), np.int32),
        np.array([[4, -1]]), np.array([[7, 7, 7]] * 5), np.array([[2, 1], [1, 2], [2, 1]]),
    ]
    for rows in cases:
        _same_as_numpy(rows)


def test_unique_rows_by_hand() -> None:
    rows = np.array([[1, 2], [1, 2], [-1, 5], [0, 0], [-1, 5]])
    u, i, v = unique_rows(rows)
    assert u.tolist() == [[-1, 5], [0, 0], [1, 2]]
    assert i.tolist() == [2, 3, 0]
    assert v.tolist() == [2, 2, 0, 1, 0]
