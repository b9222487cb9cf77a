"""Spherical k-means in torch (CUDA or CPU): the device twin of
:func:`pairkit.mine.clusters.spherical_kmeans`.

The same steps: train on at most ``max_points_per_centroid * k`` rows (the same seeded
numpy sample), greedy k-means++ seeds on the chord distance ``2 - 2 cos`` with
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
    n, d = x.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, d), dtype=np.float32)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, n)
    dev = torch.device(device)
    rng = np.random.default_rng(seed)
    if k == 1:
        centroid = x.mean(axis=0, keepdims=True)
        centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
        return np.zeros(n, dtype=np.int64), centroid.astype(np.float32)
    train_np = x
    if n > max_points_per_centroid * k:
        train_np = x[np.sort(rng.choice(n, size=max_points_per_centroid * k, replace=False))]
    train = torch.from_numpy(train_np).to(dev)
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
