"""The cluster rule's graph space: principal components whitened by the views' differences."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.mine.clusters import pca_rows
from pairkit.mine.view_whitening import (
    MIN_PAIRS,
    WIDTH,
    ledoit_wolf_shrinkage,
    view_pairs,
    view_whitened_rows,
)


def test_view_pairs_each_row_with_the_next_of_its_source() -> None:
    sources = np.array(["b", "a", "b", "c", "a", "b"])
    # a: rows 1, 4; b: rows 0, 2, 5; c: row 3 alone
    assert view_pairs(sources, seed=0).tolist() == [[1, 4], [0, 2], [2, 5]]
    few = view_pairs(sources, seed=0, max_pairs=2)
    assert len(few) == 2 and {tuple(p) for p in few} <= {(1, 4), (0, 2), (2, 5)}
    assert (view_pairs(sources, seed=0, max_pairs=2) == few).all()  # seeded


def test_ledoit_wolf_shrinkage_matches_scikit_learn() -> None:
    from sklearn.covariance import ledoit_wolf_shrinkage as reference

    rng = np.random.default_rng(0)
    for n, p in ((50, 20), (400, 30), (30, 60)):
        x = rng.standard_normal((n, p)) * np.linspace(0.2, 3.0, p)
        assert ledoit_wolf_shrinkage(x) == pytest.approx(
            reference(x, assume_centered=True), rel=1e-9, abs=1e-12)
        assert ledoit_wolf_shrinkage(x, x.T @ x / n) == ledoit_wolf_shrinkage(x)  # S given
    assert ledoit_wolf_shrinkage(np.ones((5, 3))) == pytest.approx(
        reference(np.ones((5, 3)), assume_centered=True))


def _views(n_sources: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two views per source in 40 dims: the class (two of them) on a weak direction, the
    views differing strongly on 10 others (the augmentation), each source its own
    smaller spread on all (what tells two images of one class apart)."""
    rng = np.random.default_rng(seed)
    cls = rng.integers(0, 2, n_sources)
    base = rng.standard_normal((n_sources, 40)) * 0.1
    base[:, 0] += np.where(cls == 1, 0.4, -0.4)
    rows = np.concatenate([base + np.pad(rng.standard_normal((n_sources, 10)), ((0, 0), (1, 29)))
                           for _ in range(2)])
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    sources = np.tile(np.arange(n_sources), 2)
    return rows.astype(np.float32), sources, np.tile(cls, 2)


def test_view_whitened_rows_equal_the_formula() -> None:
    x, sources, _ = _views(300, seed=1)
    got = np.asarray(view_whitened_rows(x, sources, 8, sample=500, seed=3)[np.arange(len(x))])
    # the reference, step by step (module docstring), float64, from the rows themselves:
    # the principal components of all 600 rows (under fit_whitening's 20,000-row sample),
    # the fewest holding 99% of the variance
    xd = x.astype(np.float64)
    mean = xd.mean(axis=0)
    vals, vecs = np.linalg.eigh(np.cov(xd, rowvar=False))
    vals, vecs = vals[::-1], vecs[:, ::-1]
    width = min(WIDTH, int(np.searchsorted(np.cumsum(vals) / vals.sum(), 0.99) + 1))
    assert 8 < width < x.shape[1]  # the variance cut is in play
    comps = vecs[:, :width]
    pairs = view_pairs(sources, 3)
    diff = (xd[pairs[:, 0]] - xd[pairs[:, 1]]) @ comps
    s = ledoit_wolf_shrinkage(diff)
    cov = diff.T @ diff / len(diff)
    cov = (1 - s) * cov + s * np.trace(cov) / width * np.eye(width)
    cvals, cvecs = np.linalg.eigh(cov)
    white = cvecs @ np.diag(cvals ** -0.5) @ cvecs.T
    z = (xd - mean) @ comps @ white  # every row whitened: its principal axes by an SVD
    _, _, vt = np.linalg.svd(z - z.mean(0), full_matrices=False)
    want = z @ vt[:8].T
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert got.shape == (600, 8)
    # an eigenvector's sign is free: compare per component up to it
    signs = np.sign((got * want).sum(axis=0))
    np.testing.assert_allclose(got, want * signs, atol=2e-4)


def test_view_whitened_rows_from_a_given_fit_equal_their_own() -> None:
    from pairkit.mine.whitening import fit_whitening

    x, sources, _ = _views(300, seed=5)
    own = view_whitened_rows(x, sources, 8, seed=2)
    # the mutual-neighbour rule's fit (power 1/4): the same components and variances
    given = view_whitened_rows(x, sources, 8, seed=2, principal=fit_whitening(x, seed=2))
    np.testing.assert_array_equal(np.asarray(own[np.arange(len(x))]),
                                  np.asarray(given[np.arange(len(x))]))


def test_view_whitening_finds_the_class_the_augmentation_hides() -> None:
    x, sources, cls = _views(400, seed=2)

    def purity(rows: np.ndarray) -> float:
        """Share of rows whose nearest row of another source has their class."""
        s = rows @ rows.T
        s[sources[:, None] == sources[None, :]] = -np.inf
        return float((cls[s.argmax(axis=1)] == cls).mean())

    plain = np.asarray(pca_rows(x, 8, sample=800, seed=0)[np.arange(len(x))])
    white = np.asarray(view_whitened_rows(x, sources, 8, sample=800, seed=0)[np.arange(len(x))])
    assert purity(plain) < 0.75  # the views' differences dominate the plain components
    assert purity(white) > 0.95


def test_one_view_per_source_keeps_the_plain_components() -> None:
    x, sources, _ = _views(300, seed=4)
    single = np.arange(len(x))  # every row its own source: no view pairs
    got = view_whitened_rows(x, single, 8, sample=500, seed=0)
    want = pca_rows(x, 8, sample=500, seed=0)
    np.testing.assert_array_equal(np.asarray(got[np.arange(50)]), np.asarray(want[np.arange(50)]))
    few = np.concatenate([np.arange(MIN_PAIRS - 1), np.arange(len(x) - MIN_PAIRS + 1) + 10_000])
    few[len(x) // 2 : len(x) // 2 + MIN_PAIRS - 1] = np.arange(MIN_PAIRS - 1)  # 99 pairs
    assert len(view_pairs(few, 0)) == MIN_PAIRS - 1
    got = view_whitened_rows(x, few, 8, sample=500, seed=0)
    np.testing.assert_array_equal(np.asarray(got[np.arange(50)]), np.asarray(want[np.arange(50)]))
