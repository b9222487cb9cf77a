"""Spherical k-means (Dhillon & Modha 2001): :func:`spherical_kmeans`, in numpy here or in
torch on a device.

Each L2-normalised row goes to the centroid of highest cosine similarity and the
centroids are re-normalised after each update, so the clusters are cones on the unit
sphere; a fixed seed makes the assignment reproducible. The torch form
(:func:`torch_spherical_kmeans`, CUDA or CPU) takes the same steps: train on at most
``max_points_per_centroid * k`` rows (the same seeded numpy sample), greedy k-means++
seeds on the chord distance ``2 - 2 cos`` with
``2 + log k`` candidates per step (Arthur & Vassilvitskii 2007; the scikit-learn
variant), then ``niter`` Lloyd steps (assign to the centroid of highest inner product,
mean, re-normalise: Dhillon & Modha 2001) that stop early when nothing moves; an empty
cluster is re-seeded at the rows farthest from their centroid. The k-means++ draws come
from a torch generator on the device seeded by ``seed`` (drawing on the host would move
the N distances across every step), so the clusters are not the numpy ones; the
objective agrees within a small tolerance (tests/index/test_kmeans.py). Every row is
finally assigned exactly (:class:`~pairkit.index.torch_search.TorchFlatIndex`, ties to
the lowest centroid id, like ``np.argmax``).

Memory: the training rows once on the device, plus blocks of rows x k scores.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.core.devices import host_tensor


def spherical_kmeans(
    vectors: np.ndarray,
    k: int,
    *,
    seed: int = 0,
    niter: int = 20,
    max_points_per_centroid: int = 256,
    block: int = 65_536,
    backend: Any = None,
    init: str = "k-means++",
) -> tuple[np.ndarray, np.ndarray]:
    """Cluster L2-normalised ``vectors`` (N, d) into ``k`` cones.

    Returns ``(assign, centroids)``: int64 cluster id per row, shape (N,), and
    float32 unit-norm centroids, shape (k', d) with ``k' = min(k, N)``.
    Seeding is k-means++ (Arthur & Vassilvitskii 2007) on the chord distance
    ``2 - 2 cos``, which avoids most of the bad local optima of a uniform random
    start (one bad run in ten on four clean blobs with FAISS's random start);
    then ``niter`` Lloyd steps. Training uses at most ``max_points_per_centroid
    * k`` rows (a seeded sample); every row is then assigned, ``block`` rows at a
    time. Deterministic for a seed. ``init="random"`` starts from k distinct sampled
    rows instead (cheap, for many small cells). ``backend``: a
    :class:`pairkit.index.backend.SearchBackend`; ``torch`` runs the same steps in torch
    on its device (:func:`torch_spherical_kmeans`: other random
    draws, the same objective within a tolerance); None or FAISS: numpy here.
    """
    x = np.asarray(vectors, dtype=np.float32)
    n = len(x)
    k, trivial = _trivial(x, k)
    if trivial is not None:
        return trivial
    if backend is not None and backend.name == "torch" and init != "random":
        return torch_spherical_kmeans(x, k, seed=seed, niter=niter, device=backend.device,
                                      max_points_per_centroid=max_points_per_centroid)
    rng = np.random.default_rng(seed)
    train = _training_rows(x, k, max_points_per_centroid, rng)
    if init == "random":  # cheap start for many small cells (no quality claim)
        centroids = np.ascontiguousarray(train[np.sort(rng.choice(len(train), size=k,
                                                                  replace=False))])
    else:
        centroids = _kmeanspp(train, k, rng)
    for _ in range(niter):
        assign = np.argmax(train @ centroids.T, axis=1)
        counts = np.bincount(assign, minlength=k)
        order = np.argsort(assign, kind="stable")
        sums = np.zeros_like(centroids)
        present = np.flatnonzero(counts)
        starts = np.concatenate([[0], np.cumsum(counts[present])[:-1]])
        sums[present] = np.add.reduceat(train[order], starts, axis=0)
        empty = np.flatnonzero(counts == 0)
        if len(empty):  # re-seed an empty cluster at the rows farthest from their centroid
            fit = np.einsum("nd,nd->n", train, centroids[assign])
            sums[empty] = train[np.argsort(fit, kind="stable")[: len(empty)]]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        new = (sums / np.maximum(norms, 1e-12)).astype(np.float32)
        if np.array_equal(new, centroids):
            break
        centroids = new
    out = np.empty(n, dtype=np.int64)
    for s in range(0, n, block):
        out[s : s + block] = np.argmax(x[s : s + block] @ centroids.T, axis=1)
    return out, centroids


def _trivial(x: np.ndarray, k: int) -> tuple[int, tuple[np.ndarray, np.ndarray] | None]:
    """``(min(k, N), result)``: the result without iterating (no rows, or one cluster:
    the normalised mean), else None; ValueError for k < 1."""
    n, d = x.shape
    if n == 0:
        return k, (np.zeros(0, dtype=np.int64), np.zeros((0, d), dtype=np.float32))
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, n)
    if k > 1:
        return k, None
    centroid = x.mean(axis=0, keepdims=True)
    centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
    return k, (np.zeros(n, dtype=np.int64), centroid.astype(np.float32))


def _training_rows(x: np.ndarray, k: int, max_points_per_centroid: int,
                   rng: np.random.Generator) -> np.ndarray:
    """The rows k-means trains on: all, or a seeded sample of ``max_points_per_centroid
    * k`` (sorted, so in store order)."""
    n = len(x)
    if n <= max_points_per_centroid * k:
        return x
    return x[np.sort(rng.choice(n, size=max_points_per_centroid * k, replace=False))]


def _kmeanspp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ seeds among the rows of ``x`` (unit rows): at each step
    ``2 + log k`` candidates are drawn with probability proportional to their chord
    distance squared to the nearest seed, and the one that lowers the total most is
    kept (the variant scikit-learn uses)."""
    n = len(x)
    trials = 2 + int(np.log(k))
    chosen = [int(rng.integers(n))]
    nearest = np.maximum(2.0 - 2.0 * (x @ x[chosen[0]]), 0.0).astype(np.float64)
    for _ in range(1, k):
        total = float(nearest.sum())
        if total <= 0:
            chosen.append(int(rng.integers(n)))
            continue
        cand = rng.choice(n, size=trials, p=nearest / total)
        dist = np.minimum(nearest[None, :], np.maximum(2.0 - 2.0 * (x[cand] @ x.T), 0.0)
                          .astype(np.float64))
        best = int(np.argmin(dist.sum(axis=1)))
        chosen.append(int(cand[best]))
        nearest = dist[best]
    return np.ascontiguousarray(x[chosen], dtype=np.float32)


def torch_spherical_kmeans(
    vectors: np.ndarray,
    k: int,
    *,
    seed: int = 0,
    niter: int = 20,
    max_points_per_centroid: int = 256,
    device: str = "cpu",
    block_scores: int = 1 << 27,
) -> tuple[np.ndarray, np.ndarray]:
    """Cluster L2-normalised ``vectors`` (N, d) into ``min(k, N)`` cones on ``device``.

    Returns ``(assign, centroids)``: int64 (N,) cluster per row and float32 unit-norm
    centroids (k', d). ``block_scores`` bounds the rows x k score block.
    """
    import torch

    from pairkit.index.torch_search import TorchFlatIndex

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    k, trivial = _trivial(x, k)
    if trivial is not None:
        return trivial
    dev = torch.device(device)
    rng = np.random.default_rng(seed)
    train_np = _training_rows(x, k, max_points_per_centroid, rng)
    train = host_tensor(train_np).to(dev)
    gen = torch.Generator(device=dev).manual_seed(int(seed) % (2**63))
    centroids = kmeanspp(train, k, gen)
    step = max(1, block_scores // k)
    for _ in range(niter):
        assign = torch.cat([(train[s : s + step] @ centroids.T).argmax(dim=1)
                            for s in range(0, len(train), step)])
        sums = torch.zeros_like(centroids).index_add_(0, assign, train)
        counts = torch.bincount(assign, minlength=k)
        empty = torch.nonzero(counts == 0).flatten()
        if len(empty):  # re-seed an empty cluster at the rows farthest from their centroid
            fit = (train * centroids[assign]).sum(dim=1)
            far = torch.sort(fit, stable=True).indices[: len(empty)]
            sums[empty] = train[far]
        new = sums / sums.norm(dim=1, keepdim=True).clamp_min(1e-12)
        if torch.equal(new, centroids):
            break
        centroids = new
    centroids_np = centroids.float().cpu().numpy()
    _, ids = TorchFlatIndex(centroids_np, device=device).search(x, 1)
    return ids[:, 0].astype(np.int64), centroids_np


def kmeanspp(x: Any, k: int, gen: Any) -> Any:
    """Greedy k-means++ seeds among the unit rows of ``x`` (a tensor on any device):
    ``2 + log k`` candidates per step drawn with probability proportional to the squared
    chord distance to the nearest seed, the one lowering the total most kept.
    Returns (k, d) float32 centroids on ``x``'s device."""
    import torch

    n = len(x)
    trials = 2 + int(np.log(k))
    first = int(torch.randint(n, (1,), generator=gen, device=x.device))
    chosen = [first]
    nearest = (2.0 - 2.0 * (x @ x[first])).clamp_min(0.0)
    for _ in range(1, k):
        total = nearest.sum()
        if float(total) <= 0:
            chosen.append(int(torch.randint(n, (1,), generator=gen, device=x.device)))
            continue
        cand = torch.multinomial(nearest / total, trials, replacement=True, generator=gen)
        dist = torch.minimum(nearest.unsqueeze(0), (2.0 - 2.0 * (x[cand] @ x.T)).clamp_min(0.0))
        best = int(torch.argmin(dist.sum(dim=1)))
        chosen.append(int(cand[best]))
        nearest = dist[best]
    return x[torch.tensor(chosen, device=x.device)].float().contiguous()
