"""Search outside the query's clusters, against brute force with the rows filtered out."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.index.outside import OutsideSearcher, masked_exact_search
from pairkit.index.search import knn_search


def unit(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute(x: np.ndarray, assign: np.ndarray, rows: np.ndarray, k: int):
    """One query at a time: allowed rows sorted by (score desc, id asc)."""
    out_s = np.full((len(rows), k), -np.inf, np.float32)
    out_i = np.full((len(rows), k), -1, np.int64)
    for r, q in enumerate(rows):
        allowed = [j for j in range(len(x)) if all(assign[g, j] != assign[g, q]
                                                   for g in range(len(assign)))]
        sims = [(float(np.float32(x[q] @ x[j])), j) for j in allowed]
        sims.sort(key=lambda t: (-t[0], t[1]))
        for c, (s, j) in enumerate(sims[:k]):
            out_s[r, c], out_i[r, c] = s, j
    return out_s, out_i


@pytest.mark.parametrize("big_group", [1, 10_000])  # every group through FAISS / numpy
def test_masked_exact_search_equals_brute_force(big_group):
    x = unit(120, 6)
    x[7] = x[3]  # exact ties
    x[9] = x[3]
    rng = np.random.default_rng(1)
    assign = np.stack([rng.integers(0, 4, 120), rng.integers(0, 3, 120)])
    rows = np.arange(0, 120, 2)
    s, i = masked_exact_search(x, assign, rows, 7, big_group=big_group)
    rs, ri = brute(x, assign, rows, 7)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(s, rs, atol=1e-6)


def test_masked_exact_search_pads_when_few_rows_are_allowed():
    x = unit(10, 3)
    assign = np.array([[0] * 8 + [1, 1]])
    s, i = masked_exact_search(x, assign, np.array([0, 8]), 5)
    assert (i[0, :2] >= 8).all() and (i[0, 2:] == -1).all() and np.isinf(s[0, 2:]).all()
    assert (i[1] >= 0).all() and (i[1] < 8).all()


def test_outside_searcher_exact_parts_equal_brute_force():
    x = unit(90, 5, seed=3)
    parts = np.random.default_rng(2).integers(0, 5, 90)

    def make(sub: np.ndarray):
        return lambda q, k: knn_search(q, sub, k)

    search = OutsideSearcher(x, parts, make).search
    rows = np.arange(90)
    s, i = search(rows, 6)
    rs, ri = brute(x, parts[None, :], rows, 6)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(s, rs, atol=1e-6)
    # searching only the nearest parts is a subset of the same order
    approx = OutsideSearcher(x, parts, make, max_parts=2).search(rows, 6)[1]
    assert ((approx == -1) | (parts[np.maximum(approx, 0)] != parts[rows][:, None])).all()
