"""Spherical k-means pseudo-labels (used by the ``cluster`` false-negative rule).

Spherical k-means assigns each L2-normalised row to the centroid of highest
cosine similarity and re-normalises the centroids after each update, so the
clusters are cones on the unit sphere (Dhillon & Modha 2001). FAISS does the
work; a fixed seed makes the assignment reproducible.
"""

from __future__ import annotations

import numpy as np


def spherical_kmeans(
    vectors: np.ndarray,
    k: int,
    *,
    seed: int = 0,
    niter: int = 20,
    max_points_per_centroid: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """Cluster L2-normalised ``vectors`` (N, d) into ``k`` cones.

    Returns ``(assign, centroids)``: int64 cluster id per row, shape (N,), and
    float32 unit-norm centroids, shape (k', d) with ``k' = min(k, N)``.
    Training uses at most ``max_points_per_centroid * k`` rows (a seeded
    sample, as FAISS does); every row is then assigned.
    """
    import faiss

    from pairkit.index.search import as_float32, knn_search

    x = as_float32(vectors)
    n, d = x.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, d), dtype=np.float32)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, n)
    if k == 1:
        centroid = x.mean(axis=0, keepdims=True)
        centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
        return np.zeros(n, dtype=np.int64), centroid.astype(np.float32)
    km = faiss.Kmeans(
        d,
        k,
        niter=niter,
        seed=int(seed) % (2**31),
        spherical=True,
        max_points_per_centroid=max_points_per_centroid,
        min_points_per_centroid=1,
        verbose=False,
    )
    km.train(x)
    centroids = np.ascontiguousarray(km.centroids, dtype=np.float32)
    _, ids = knn_search(x, centroids, 1)
    return ids[:, 0].astype(np.int64), centroids


def cluster_counts(n: int, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Number of clusters for each wanted mean cluster size: ``max(2, round(n / size))``,
    capped at ``n``. Returns one count per entry of ``sizes``."""
    return tuple(int(min(n, max(2, round(n / s)))) for s in sizes)


def knn_graph(
    vectors: np.ndarray, sources: np.ndarray, m: int, *, batch_size: int = 8192
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``m`` nearest rows of *other* sources (exact inner product).

    Returns ``(ids, scores)`` of shape (N, m): int64 row ids (-1 padded where
    fewer exist) and float32 similarities, best first.
    """
    from pairkit.index.search import knn_search

    sources = np.asarray(sources, dtype=np.int64)
    n = len(vectors)
    views = int(np.bincount(sources).max()) if n else 1
    scores, ids = knn_search(vectors, vectors, min(n, m + views), batch_size=batch_size)
    own = (ids < 0) | (sources[np.maximum(ids, 0)] == sources[:, None])
    order = np.argsort(own, axis=1, kind="stable")[:, :m]
    ids = np.take_along_axis(np.where(own, -1, ids), order, axis=1)
    scores = np.take_along_axis(np.where(own, -np.inf, scores), order, axis=1)
    if ids.shape[1] < m:  # fewer rows than m + views
        pad = m - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return ids, scores.astype(np.float32)


def propagate_once(labels: np.ndarray, nb: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """One label-propagation step: each row's weighted majority label among its
    neighbours ``nb`` (N, m), weights (N, m) (negative or padded entries count 0);
    ties go to the smallest label; a row with no neighbour keeps its label.
    Returns the proposed labels, int64 (N,)."""
    n, m = nb.shape
    if n == 0 or m == 0:
        return labels.copy()
    valid = nb >= 0
    w = np.where(valid, np.maximum(weights, 0.0), 0.0).astype(np.float64)
    nl = np.where(valid, labels[np.maximum(nb, 0)], -1)
    order = np.argsort(nl, axis=1, kind="stable")
    sl = np.take_along_axis(nl, order, axis=1)
    sw = np.take_along_axis(w, order, axis=1)
    new_run = np.ones(sl.shape, dtype=bool)
    new_run[:, 1:] = sl[:, 1:] != sl[:, :-1]
    starts = np.flatnonzero(new_run.ravel())
    total = np.add.reduceat(sw.ravel(), starts)
    run_row = starts // m  # nondecreasing; every row has at least one run
    run_label = sl.ravel()[starts]
    total = np.where(run_label >= 0, total, -1.0)
    row_first = np.flatnonzero(np.r_[True, run_row[1:] != run_row[:-1]])
    row_max = np.maximum.reduceat(total, row_first)
    # runs are in label order within a row, so the first run at the row's
    # maximum is the heaviest label, ties to the smallest
    at_max = np.flatnonzero(total == row_max[run_row])
    first = at_max[np.r_[True, run_row[at_max[1:]] != run_row[at_max[:-1]]]]
    proposal = run_label[first]
    has = total[first] > 0
    return np.where(has, proposal, labels).astype(np.int64)


def label_propagation(
    nb: np.ndarray,
    weights: np.ndarray,
    *,
    iters: int = 30,
    seed: int = 0,
    update_fraction: float = 0.5,
) -> np.ndarray:
    """Communities of a kNN graph by weighted label propagation (Raghavan,
    Albert & Kumara 2007). Every row starts with its own label; each step a
    seeded random ``update_fraction`` of rows takes the weighted majority label
    of its neighbours (updating only part of the rows damps the oscillations of
    fully synchronous propagation). Stops after ``iters`` steps or when under
    0.01 % of rows would change. Returns int64 community id per row, shape (N,),
    numbered 0.. in order of first appearance.
    """
    n = len(nb)
    labels = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for _ in range(iters):
        proposal = propagate_once(labels, nb, weights)
        if int((proposal != labels).sum()) <= n * 1e-4:
            labels = proposal
            break
        update = rng.random(n) < update_fraction
        labels = np.where(update, proposal, labels)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse].astype(np.int64)
