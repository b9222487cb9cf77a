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
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, n)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, d), dtype=np.float32)
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
