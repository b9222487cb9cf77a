"""The pixel check's candidate pairs: by hand, and identical to the np.unique(axis=0)
computation they had before (fix-small: core/unique.unique_rows instead)."""

from __future__ import annotations

import numpy as np

from pairkit.mine.near_duplicate_check import candidate_pairs


def _reference(cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The code before, verbatim: np.unique over the stacked pairs, axis=0."""
    own = np.arange(len(cand), dtype=np.int64)
    a = np.repeat(own, cand.shape[1])
    b = cand.ravel()
    keep = b >= 0
    a, b = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
    pairs = np.unique(np.stack([a, b], axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return pairs[:, 0], pairs[:, 1]


def test_candidate_pairs_by_hand() -> None:
    cand = np.array([[1, 2, -1], [0, 1, 2], [0, -1, -1], [-1, -1, -1]])
    a, b = candidate_pairs(cand)
    assert list(zip(a.tolist(), b.tolist(), strict=True)) == [(0, 1), (0, 2), (1, 2)]
    assert a.dtype == b.dtype == np.int64


def test_candidate_pairs_identical_to_np_unique_axis0() -> None:
    rng = np.random.default_rng(0)
    cases = [rng.integers(-1, 40, (40, 16)),  # many repeats, -1 padding, self ids
             rng.integers(-1, 5000, (5000, 16)),  # few repeats
             np.full((3, 4), -1), np.zeros((0, 16), np.int64), np.array([[0]])]
    for cand in cases:
        for got, want in zip(candidate_pairs(cand), _reference(cand), strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
