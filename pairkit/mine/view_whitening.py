"""The space the ``cluster`` rule builds its kNN graph in: the rows' principal components
whitened by what two views of one source differ by.

Two views of one image differ by the augmentation (a crop, a flip, a colour change), not
by what the image shows; directions along which they differ are nuisance, and in the
plain principal components they can be as large as the directions that part one class
from its siblings. The *learned whitening* of Mikolajczyk & Matas (ICCV 2007, *Improving
descriptors for fast tree matching by optimal linear projection*; as Radenović, Tolias &
Chum use it on CNN descriptors, PAMI 2018) whitens by the covariance of such differences,
``C_S``, so those directions shrink and the others grow; ``train``'s pair whitening does
the same to the head's outputs with the pair table's pairs
(:mod:`pairkit.train.pair_whitening`). Here the pairs are the store's own views, known
without labels:

1. the :data:`WIDTH` leading principal components of a seeded sample, those of the
   ``mutual-neighbour`` rule's partial whitening (:func:`fit_whitening`: the fewest
   holding 99% of the variance, if fewer), fitted once for both;
2. ``C_S`` of at most :data:`MAX_PAIRS` view pairs (each source's rows in id order, each
   with the next, a seeded sample), in those components, shrunk towards a multiple of
   the identity by the Ledoit-Wolf estimate of the best shrinkage (Ledoit & Wolf 2004,
   *A well-conditioned estimator for large-dimensional covariance matrices*, J.
   Multivariate Analysis): 1,200 pairs in 256 dims need more than 8,000 do, and the
   data say how much;
3. the components whitened by ``C_S^(-1/2)``, then rotated onto the sample's
   ``dims`` leading principal components in the whitened space (the eigenvectors of
   ``C_S^(-1/2) diag(variances) C_S^(-1/2)``: no row read for them);
4. every row mapped by the one linear map and normalised, computed when read
   (:func:`projected_rows`).

A store with fewer than :data:`MIN_PAIRS` view pairs (one view per source) keeps the
plain principal components (:func:`pca_rows`). Measured on real long-tailed sets
(docs/benchmarks.md, "The cluster rule's graph in view-whitened components").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.core.row_view import RowView, is_view
from pairkit.mine.clusters import pca_rows, projected_rows
from pairkit.mine.whitening import Whitening, fit_whitening

WIDTH = 256  # principal components the views' differences are whitened in
MAX_PAIRS = 20_000  # view pairs C_S is computed on (a seeded sample)
MIN_PAIRS = 100  # fewer: the plain principal components
PAIR_STREAM = (61, 2)  # the pairs' sample's random stream, after the run's seed
BLOCK = 8192  # rows read at a time for the differences


def view_pairs(sources: np.ndarray, seed: int, max_pairs: int = MAX_PAIRS) -> np.ndarray:
    """(P, 2) int64 row pairs of one source: each source's rows in id order, each row
    with the next; at most ``max_pairs`` of them (a seeded sample, in order)."""
    src = np.asarray(sources)
    order = np.argsort(src, kind="stable")
    same = src[order[1:]] == src[order[:-1]]
    pairs = np.stack([order[:-1][same], order[1:][same]], axis=1).astype(np.int64)
    if len(pairs) > max_pairs:
        rng = np.random.default_rng([seed, *PAIR_STREAM])
        pairs = pairs[np.sort(rng.choice(len(pairs), max_pairs, replace=False))]
    return pairs


def ledoit_wolf_shrinkage(diff: np.ndarray, moment: np.ndarray | None = None) -> float:
    """The Ledoit-Wolf estimate of the shrinkage ``s`` in ``(1 - s) S + s mu I`` for the
    second-moment matrix ``S = diff^T diff / n`` of the rows of ``diff`` (n, p), taken as
    zero-mean (differences of pairs are), ``mu = tr(S) / p``; in [0, 1]. ``moment``: that
    ``S`` (float64), when the caller has it."""
    n, p = diff.shape
    x = np.asarray(diff, np.float64)
    s = x.T @ x / n if moment is None else moment
    mu = float(np.trace(s)) / p
    delta = float(((s - mu * np.eye(p)) ** 2).sum())
    if delta <= 0.0:
        return 1.0
    sq = x * x
    beta = (float((sq.T @ sq).sum()) / n - float((s * s).sum())) / n
    return float(min(max(beta, 0.0), delta) / delta)


def view_whitened_rows(vectors: Any, sources: np.ndarray, dims: int = 128, *,
                       sample: int = 5_000, seed: int = 0,
                       principal: Whitening | None = None) -> RowView:
    """Every row in the view-whitened components (module docstring), unit length,
    computed when read: a :class:`~pairkit.core.row_view.RowView` of ``vectors``.

    ``principal``: the rows' principal components as the ``mutual-neighbour`` rule's
    whitening fitted them (:func:`pairkit.mine.whitening.fit_whitening`; its components
    and their variances, not its scaling), so they are not fitted twice; None: fitted
    here the same way. ``sample``: the plain components' sample where there are too few
    view pairs (:func:`pca_rows`)."""
    x = vectors if is_view(vectors) else np.asarray(vectors)
    n, d = x.shape
    pairs = view_pairs(sources, seed)
    if d <= dims or n < 3 or len(pairs) < MIN_PAIRS:
        return pca_rows(x, dims, sample=sample, seed=seed)
    if principal is None:
        principal = fit_whitening(x, power=0.0, seed=seed)
    width = min(WIDTH, principal.dims)
    comps = np.ascontiguousarray(principal.components[:, :width], dtype=np.float32)
    diff = np.empty((len(pairs), width), np.float64)
    for s in range(0, len(pairs), BLOCK):
        p = pairs[s : s + BLOCK]
        rows, at = np.unique(p, return_inverse=True)
        block = np.asarray(x[rows], dtype=np.float32)
        at = at.reshape(p.shape)
        diff[s : s + len(p)] = (block[at[:, 0]] - block[at[:, 1]]) @ comps  # the mean cancels
    cov = diff.T @ diff / len(diff)
    shrink = ledoit_wolf_shrinkage(diff, cov)
    scale = float(np.trace(cov)) / len(cov)
    if not np.isfinite(cov).all() or scale <= 1e-12:  # the views do not differ
        return pca_rows(x, dims, sample=sample, seed=seed)
    cov = (1.0 - shrink) * cov + shrink * scale * np.eye(len(cov))
    values, vecs = np.linalg.eigh(cov)
    values = np.maximum(values, values.max() * 1e-12)
    white = (vecs * values ** -0.5) @ vecs.T  # C_S^(-1/2), (width, width)
    # the sample's covariance in the whitened components: diagonal (the variances) in the
    # principal ones, so C_S^(-1/2) diag(variances) C_S^(-1/2), no row read again
    spread, axes = np.linalg.eigh((white * principal.variances[:width]) @ white)
    keep = axes[:, np.argsort(spread)[::-1][: min(dims, len(spread))]]
    projection = comps.astype(np.float64) @ white @ keep  # (d, dims)
    return projected_rows(x, principal.mean,
                          np.ascontiguousarray(projection, dtype=np.float32))
