"""Alignment and uniformity against the formulas on hand-made vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pairkit.eval.geometry import (
    alignment,
    pair_alignment,
    pair_sq_dists,
    positive_pairs,
    random_pairs,
    uniformity,
)


def test_hand_made_square() -> None:
    x = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], dtype=np.float32)
    groups = np.array([0, 0, 1, 1])
    rng = np.random.default_rng(0)
    pi, pj = positive_pairs(groups, 100, rng)
    assert sorted(zip(pi.tolist(), pj.tolist(), strict=True)) == [(0, 1), (2, 3)]
    assert alignment(x, pi, pj) == pytest.approx(2.0)  # ||e1 - e2||^2 = 2
    assert alignment(x, pi, pj, alpha=1) == pytest.approx(math.sqrt(2))
    ui, uj = random_pairs(4, 100, rng)
    assert len(ui) == 6
    # squared distances: four pairs at 2, two opposite pairs at 4
    expect = math.log((4 * math.exp(-4) + 2 * math.exp(-8)) / 6)
    assert uniformity(x, ui, uj) == pytest.approx(expect)


def test_identical_views_align_perfectly_and_no_pairs_is_none() -> None:
    x = np.array([[0.6, 0.8], [0.6, 0.8], [1, 0]], dtype=np.float32)
    rng = np.random.default_rng(0)
    pi, pj = positive_pairs(np.array([0, 0, 1]), 10, rng)
    assert alignment(x, pi, pj) == pytest.approx(0.0, abs=1e-12)
    none_i, none_j = positive_pairs(np.array([0, 1, 2]), 10, rng)
    assert alignment(x, none_i, none_j) is None
    assert uniformity(x[:1], *random_pairs(1, 10, rng)) is None


def test_sampled_pairs_are_valid_and_close_to_exact() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 6))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    groups = np.repeat(np.arange(40), 10)
    all_i, all_j = positive_pairs(groups, 10**6, rng)
    assert len(all_i) == 40 * 45
    si, sj = positive_pairs(groups, 1500, rng)
    assert len(si) == 1500
    assert (si != sj).all() and (groups[si] == groups[sj]).all()
    assert alignment(x, si, sj) == pytest.approx(alignment(x, all_i, all_j), rel=0.05)
    ei, ej = random_pairs(400, 10**6, rng)
    ri, rj = random_pairs(400, 20000, rng)
    assert (ri != rj).all()
    assert uniformity(x, ri, rj) == pytest.approx(uniformity(x, ei, ej), abs=0.03)


def test_pair_alignment_row_by_row_over_its_chunks() -> None:
    """Row r of za with row r of zp, over more rows than one 65,536-row chunk: the mean
    squared distance, as the formula over explicit pairs gives it."""
    rng = np.random.default_rng(3)
    za = rng.normal(size=(65_537, 3)).astype(np.float32)
    zp = rng.normal(size=(65_537, 3)).astype(np.float32)
    want = float(np.mean(np.sum((za.astype(np.float64) - zp) ** 2, axis=1)))
    assert pair_alignment(za, zp) == pytest.approx(want, rel=1e-12)
    n = len(za)
    assert pair_alignment(za, zp) == alignment(np.concatenate([za, zp]), np.arange(n),
                                               np.arange(n) + n)
    assert pair_alignment(za[:1], za[:1]) == 0.0
    assert math.isnan(pair_alignment(za[:0], zp[:0]))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_pair_sq_dists_with_more_pairs_than_rows(dtype) -> None:  # noqa: ANN001
    """More pairs than rows (the rows made float64 once, smaller chunks) and fewer: each
    pair's squared distance as the formula gives it from the float64 rows, bit for bit."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(50, 7)).astype(dtype)
    x64 = x.astype(np.float64)
    for n_pairs in (20, 20_000):
        i, j = rng.integers(0, 50, n_pairs), rng.integers(0, 50, n_pairs)
        want = np.einsum("ij,ij->i", x64[i] - x64[j], x64[i] - x64[j])
        np.testing.assert_array_equal(pair_sq_dists(x, i, j), want)
        np.testing.assert_array_equal(pair_sq_dists(x, i, j, chunk=7), want)
