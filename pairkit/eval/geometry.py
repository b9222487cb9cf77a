"""Alignment and uniformity (Wang & Isola 2020, "Understanding Contrastive
Representation Learning through Alignment and Uniformity on the Hypersphere"),
and the pair samples they and the score histograms use.

- alignment (alpha = 2): E over positive pairs (views of one source) of ||f(x) - f(y)||^alpha.
  Lower is better; 0 means the views coincide.
- uniformity (t = 2): log E over pairs of distinct items of exp(-t ||f(x) - f(y)||^2).
  Lower (more negative) is better; -4 is the limit on a high-dimensional sphere.

When a set has at most ``max_pairs`` pairs, every pair is used (exact);
otherwise ``max_pairs`` pairs are drawn uniformly at random (with replacement).
"""

from __future__ import annotations

import numpy as np


def positive_pairs(
    groups: np.ndarray, max_pairs: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j), i != j, of rows with the same group code (>= 0).

    All such unordered pairs when there are at most ``max_pairs``, else ``max_pairs``
    drawn uniformly among them. Returns two int64 arrays of equal length.
    """
    groups = np.asarray(groups, dtype=np.int64)
    rows = np.flatnonzero(groups >= 0)
    order = rows[np.argsort(groups[rows], kind="stable")]
    g = groups[order]
    if len(g) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[starts, len(g)])
    per_group = sizes * (sizes - 1) // 2
    total = int(per_group.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if total <= max_pairs:
        ii, jj = [], []
        for d in range(1, int(sizes.max())):
            same = g[d:] == g[:-d]
            ii.append(order[:-d][same])
            jj.append(order[d:][same])
        return np.concatenate(ii), np.concatenate(jj)
    pick = rng.choice(len(starts), size=max_pairs, p=per_group / total)
    m = sizes[pick]
    a = rng.integers(0, m)
    b = rng.integers(0, m - 1)
    b = b + (b >= a)
    return order[starts[pick] + a], order[starts[pick] + b]


def random_pairs(
    n: int, max_pairs: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j), i != j, among ``n`` rows: all when n(n-1)/2 <= max_pairs, else a sample."""
    if n < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if n * (n - 1) // 2 <= max_pairs:
        i, j = np.triu_indices(n, k=1)
        return i.astype(np.int64), j.astype(np.int64)
    i = rng.integers(0, n, size=max_pairs)
    j = rng.integers(0, n - 1, size=max_pairs)
    j = j + (j >= i)
    return i.astype(np.int64), j.astype(np.int64)


def pair_dots(x: np.ndarray, i: np.ndarray, j: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Inner products x[i] . x[j] (float64 (len(i),)), computed in chunks."""
    from pairkit.index.search import row_dots

    return row_dots(x, i, j, dtype=np.float64, chunk=chunk)


def pair_sq_dists(x: np.ndarray, i: np.ndarray, j: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Squared distances ||x[i] - x[j]||^2 (float64 (len(i),)), computed in chunks. With
    more pairs than rows the rows are made float64 once (not each pair's two rows over
    again: 100,000 pairs of 1,001 rows gathered 671 MB of float64 copies a chunk), and the
    chunks are smaller; the same numbers either way."""
    out = np.empty(len(i), dtype=np.float64)
    if len(i) > len(x) and isinstance(x, np.ndarray):
        x = np.asarray(x, dtype=np.float64)
        chunk = min(chunk, 8192)
    for s in range(0, len(i), chunk):
        out[s : s + chunk] = row_sq_dists(x[i[s : s + chunk]], x[j[s : s + chunk]])
    return out


def row_sq_dists(a: np.ndarray, b: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Squared distances ||a[r] - b[r]||^2 (float64 (len(a),)) of row r of ``a`` and of
    ``b`` (each (n, d)), in float64, ``chunk`` rows at a time."""
    out = np.empty(len(a), dtype=np.float64)
    for s in range(0, len(a), chunk):
        diff = np.asarray(a[s : s + chunk], np.float64) - np.asarray(b[s : s + chunk],
                                                                     np.float64)
        out[s : s + chunk] = np.einsum("ij,ij->i", diff, diff)
    return out


def alignment(x: np.ndarray, i: np.ndarray, j: np.ndarray, alpha: float = 2.0) -> float | None:
    """Mean ||x_i - x_j||^alpha over the given positive pairs; None without pairs."""
    if len(i) == 0:
        return None
    d2 = pair_sq_dists(x, i, j)
    return float(np.mean(np.maximum(d2, 0.0) ** (alpha / 2.0)))


def uniformity(x: np.ndarray, i: np.ndarray, j: np.ndarray, t: float = 2.0) -> float | None:
    """log mean exp(-t ||x_i - x_j||^2) over the given pairs; None without pairs."""
    if len(i) == 0:
        return None
    a = -t * pair_sq_dists(x, i, j)
    top = a.max()
    return float(top + np.log(np.mean(np.exp(a - top))))


UNIFORMITY_MAX_PAIRS = 2_000_000


def pair_alignment(za: np.ndarray, zp: np.ndarray) -> float:
    """:func:`alignment` of row ``r`` of ``za`` with row ``r`` of ``zp`` (each (n, d));
    NaN without rows."""
    if len(za) == 0:
        return float("nan")
    return float(np.mean(np.maximum(row_sq_dists(za, zp), 0.0)))


GRAM_MAX_ROWS = 4096  # all_pairs_uniformity: every pair from one Gram matrix up to here


def all_pairs_uniformity(z: np.ndarray, max_pairs: int = UNIFORMITY_MAX_PAIRS,
                         seed: int = 0) -> float:
    """:func:`uniformity` over every distinct pair of rows of ``z`` (n, d); NaN with fewer
    than 2 rows. Up to :data:`GRAM_MAX_ROWS` rows, exactly, from one float64 Gram matrix
    (``|x|^2 + |y|^2 - 2 x.y``: one matrix product instead of gathering both rows of
    every pair, which took ~35 s an epoch for 2,048 rows of 1,280 dims); above, over a
    seeded sample of ``max_pairs`` pairs."""
    n = len(z)
    if n < 2:
        return float("nan")
    if n > GRAM_MAX_ROWS:
        i, j = random_pairs(n, max_pairs, np.random.default_rng(seed))
        got = uniformity(z, i, j)
        return float("nan") if got is None else got
    x = np.asarray(z, dtype=np.float64)
    sq = np.einsum("ij,ij->i", x, x)
    i, j = np.triu_indices(n, k=1)
    gram = x @ x.T
    a = -2.0 * np.maximum(sq[i] + sq[j] - 2.0 * gram[i, j], 0.0)
    top = a.max()
    return float(top + np.log(np.mean(np.exp(a - top))))
