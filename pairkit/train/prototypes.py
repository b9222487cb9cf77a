"""Prototypical contrast (ProtoNCE): each anchor is also pulled towards the centroid of
its cluster, against the other centroids, at several granularities.

Li, Zhou, Xiong & Hoi 2021, *Prototypical Contrastive Learning of Unsupervised
Representations*, ICLR. At the start of every epoch the head's current outputs on the
training rows are clustered by spherical k-means at each of ``counts`` granularities
(:func:`pairkit.index.kmeans.spherical_kmeans`); each cluster c gets a concentration

    phi_c = sum_{z in c} ||z - c||  /  (|c| log(|c| + alpha)),   alpha = 10

(a loose, large cluster gets a high phi, so a soft pull; a tight one a strong pull),
clipped to its 10th-90th percentiles and scaled so that the mean phi is the loss's
temperature (as PCL's code does). The ProtoNCE term of an anchor z with cluster s is

    -log( exp(z . c_s / phi_s) / sum_j exp(z . c_j / phi_j) )

averaged over the granularities and the batch's anchors, and added to the instance loss
with weight ``weight``. No labels: the clusters are the head's own, refitted as it
trains (PCL's E-step), which is the "cluster pseudo-labels across the whole batch" of
issue 19 in a soft form: an anchor is pulled to a centroid of many mates, not to each
mate, so the structure inside a cluster stays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

ALPHA = 10.0  # PCL's smoothing of the concentration of small clusters
FIT_ROWS = 50_000  # k-means is trained on a seeded sample of at most this many rows


@dataclass(frozen=True)
class Prototypes:
    """One epoch's clusterings: per granularity, each row's cluster (-1: not a training
    row), the unit-norm centroids (k, d) and their concentrations phi (k,)."""

    assign: tuple[np.ndarray, ...]
    centroids: tuple[np.ndarray, ...]
    phi: tuple[np.ndarray, ...]


def cluster_counts(fractions: tuple[int, ...], n: int) -> tuple[int, ...]:
    """Cluster counts for ``n`` training rows: one per entry of ``fractions`` (rows per
    cluster), at least 2 and at most n // 2 each, duplicates dropped."""
    out: list[int] = []
    for per in fractions:
        k = int(min(max(2, round(n / per)), max(2, n // 2)))
        if k not in out:
            out.append(k)
    return tuple(out)


def concentration(z: np.ndarray, assign: np.ndarray, centroids: np.ndarray,
                  temperature: float) -> np.ndarray:
    """phi (k,) of PCL for rows ``z`` (n, d) in clusters ``assign`` (n,) with
    ``centroids`` (k, d): the mean distance to the centroid over log(size + alpha),
    one-member clusters given the largest phi of the others, clipped to the 10th-90th
    percentiles, scaled to mean ``temperature``."""
    k = len(centroids)
    dist = np.linalg.norm(z - centroids[assign], axis=1).astype(np.float64)
    size = np.bincount(assign, minlength=k).astype(np.float64)
    total = np.bincount(assign, weights=dist, minlength=k)
    phi = np.zeros(k, np.float64)
    many = size > 1
    phi[many] = total[many] / (size[many] * np.log(size[many] + ALPHA))
    if many.any():
        phi[~many] = phi[many].max()
    else:
        phi[:] = 1.0
    lo, hi = np.percentile(phi, 10), np.percentile(phi, 90)
    phi = np.clip(phi, lo, hi)
    if not phi.mean() > 0:
        return np.full(k, temperature, np.float32)
    return (temperature * phi / phi.mean()).astype(np.float32)


def fit_prototypes(z: np.ndarray, rows: np.ndarray, counts: tuple[int, ...],
                   temperature: float, seed: int) -> Prototypes:
    """Cluster the L2-normalised outputs ``z`` (N, d) of the training ``rows`` at each
    count; rows outside ``rows`` get cluster -1."""
    from pairkit.index.kmeans import spherical_kmeans

    assigns, cents, phis = [], [], []
    x = np.ascontiguousarray(z[rows], dtype=np.float32)
    for i, k in enumerate(counts):
        a, c = spherical_kmeans(x, k, seed=seed + 7919 * i,
                                max_points_per_centroid=max(1, FIT_ROWS // max(k, 1)))
        full = np.full(len(z), -1, dtype=np.int64)
        full[rows] = a
        assigns.append(full)
        cents.append(np.ascontiguousarray(c, dtype=np.float32))
        phis.append(concentration(x, a, c, temperature))
    return Prototypes(tuple(assigns), tuple(cents), tuple(phis))


def proto_loss(z: torch.Tensor, cluster: list[torch.Tensor], centroids: list[torch.Tensor],
               phi: list[torch.Tensor]) -> torch.Tensor:
    """ProtoNCE of rows ``z`` (B, d), L2-normalised: per granularity m, cross-entropy of
    the logits ``z @ centroids[m].T / phi[m]`` against ``cluster[m]`` (B,) (rows with -1
    left out), averaged over the granularities."""
    import torch

    terms = []
    for target, cent, conc in zip(cluster, centroids, phi, strict=True):
        keep = target >= 0
        if not bool(keep.any()):
            continue
        logits = (z[keep].float() @ cent.T) / conc[None, :]
        terms.append(torch.nn.functional.cross_entropy(logits, target[keep]))
    if not terms:
        return z.sum() * 0.0
    return torch.stack(terms).mean()
