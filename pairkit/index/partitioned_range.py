"""Range search by partitions: every pair of rows with similarity >= a threshold, found
cluster by cluster, exactly, so that no process holds more than a cluster's rows.

What ``dedup --ray`` runs (the semantic-deduplication layout of SemDeDup, Abbas et al.
2023, and NeMo Curator: k-means partitions, each searched by itself; here with the
partitions' boundaries handled, so no pair is lost):

1. **Fit** spherical k-means (:func:`pairkit.index.kmeans.spherical_kmeans`, seeded) on
   a sample of the rows, read in one pass: ``k`` centroids ``c_j``.
2. **Assign** (per block of rows, where the blocks run): each row's cluster (highest inner
   product), its distance ``||x - c_j||`` to that centroid and its norm. Each cluster's
   radius ``R_j`` is the largest distance of its members; ``M`` the largest norm.
3. **Route** (per block): a row ``a`` is a query of cluster ``j`` when
   ``||a - c_j|| <= R_j + r``, where ``r = sqrt(2 M^2 - 2 t)`` bounds ``||a - b||`` for
   any pair with ``a . b >= t`` (``||a - b||^2 = |a|^2 + |b|^2 - 2 a . b``). By the
   triangle inequality, ``||a - c_j|| <= ||a - b|| + ||b - c_j|| <= r + R_j`` for every
   member ``b`` of ``j`` that pairs with ``a``: every pair is found by the cluster of
   each of its rows. (Both bounds get a small slack for float32 rounding: a wider
   route costs time, never a pair.)
4. **Search** (per cluster): the range search of the local path
   (:func:`pairkit.index.range_search.range_search_blocks`) of the cluster's queries
   against its members. A pair of rows in clusters ``i <= j`` is kept by cluster ``j``
   only (and within one cluster once), so each pair comes out once, as ``(low, high)``.

The work is the sum over clusters of queries x members, instead of N x N: about ``k``
times less when the routes spill little (well-separated clusters); it only approaches
the global search when most rows are near most centroids, and stays exact either way.
``map_blocks`` runs steps 2-4 (here: :func:`pairkit.mine.blocks.map_here`; on Ray, the
actors, each reading its rows from the store: :class:`pairkit.core.row_view.RowView`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]
MapBlocks = Callable[[Callable[[Any, Any], Any], Any, list[Any]], Iterator[Any]]

ROWS_PER_PART = 4096  # rows per cluster on average, by default
SAMPLE_PER_PART = 64  # k-means trains on this many rows per cluster (a seeded sample)
MAX_PARTS = 4096  # clusters at most: beyond 16.7M rows they grow instead
SLACK = 1e-4  # added to the radii and to r: float32 rounding of the distances
DISTANCES = 1 << 24  # rows x clusters of distances per block (64 MB), at most


def parts_for(n: int, rows_per_part: int = ROWS_PER_PART) -> int:
    """How many clusters ``n`` rows are cut into: ``ceil(n / rows_per_part)``, between 1
    and :data:`MAX_PARTS` (so the k-means sample, read here, stays under 262,144 rows)."""
    return max(1, min(MAX_PARTS, math.ceil(n / max(1, rows_per_part))))


@dataclass
class Partitions:
    """Steps 1-2's results: ``centroids`` (k, d), each row's cluster ``own`` (n,), the
    clusters' radii (k,) and the rows' largest norm."""

    centroids: np.ndarray
    own: np.ndarray
    radii: np.ndarray
    max_norm: float

    def reach(self, threshold: float) -> float:
        """``r`` of the module docstring (with its slack)."""
        return math.sqrt(max(0.0, 2 * self.max_norm**2 - 2 * threshold)) + SLACK


@dataclass
class RouteShared:
    """What the assign and route blocks share: the rows, the centroids, and (routing)
    the radii and ``r``."""

    rows: Any
    centroids: np.ndarray
    radii: np.ndarray | None = None
    reach: float = 0.0


def centroid_distances(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x @ centroids.T, ||x - c||)`` for float32 rows ``x`` (m, d) and unit-norm
    centroids: the distances from the inner products, clipped at 0 before the root."""
    dots = x @ centroids.T
    sq = np.einsum("ij,ij->i", x, x)[:, None] + np.einsum(
        "ij,ij->i", centroids, centroids)[None, :] - 2 * dots
    return dots, np.sqrt(np.maximum(sq, 0.0))


def assign_block(shared: RouteShared, span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray,
                                                                       float]:
    """Step 2 for rows ``span``: ``(own (m,) int32, largest distance per cluster (k,),
    largest norm)``."""
    x = np.ascontiguousarray(shared.rows[slice(*span)], dtype=np.float32)
    dots, dist = centroid_distances(x, shared.centroids)
    own = np.argmax(dots, axis=1)
    radii = np.zeros(len(shared.centroids), np.float32)
    np.maximum.at(radii, own, dist[np.arange(len(x)), own].astype(np.float32))
    norm = float(np.sqrt(np.einsum("ij,ij->i", x, x).max())) if len(x) else 0.0
    return own.astype(np.int32), radii, norm


def route_block(shared: RouteShared, span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Step 3 for rows ``span``: ``(rows, clusters)``, every (row, cluster) where the row
    is a query of the cluster (its own cluster included)."""
    assert shared.radii is not None
    x = np.ascontiguousarray(shared.rows[slice(*span)], dtype=np.float32)
    _, dist = centroid_distances(x, shared.centroids)
    rows, parts = np.nonzero(dist <= (shared.radii + SLACK + shared.reach)[None, :])
    return rows.astype(np.int64) + span[0], parts.astype(np.int32)


@dataclass
class SearchShared:
    """What the cluster searches share: the rows, each row's cluster, the threshold and
    the search's batch size."""

    rows: Any
    own: np.ndarray
    threshold: float
    batch_size: int


def search_part(shared: SearchShared, part: tuple[int, np.ndarray, np.ndarray]) -> Pairs:
    """Step 4 for one cluster ``(j, members, queries)`` (row ids): its pairs, each
    ``(low, high, score)`` once (module docstring)."""
    from pairkit.index.range_search import range_search_blocks

    j, members, queries = part
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    if not len(members) or not len(queries):
        return empty
    # one read of the cluster's rows: its members are among its queries
    both = np.union1d(members, queries)
    got = np.ascontiguousarray(shared.rows[both], dtype=np.float32)
    base = got[np.searchsorted(both, members)]
    qx = got[np.searchsorted(both, queries)]
    out = []
    for qa, mb, s in range_search_blocks(qx, base, shared.threshold,
                                         batch_size=shared.batch_size, device="cpu",
                                         backend="faiss"):
        a, b = queries[qa], members[mb]
        oa = shared.own[a]
        keep = (oa < j) | ((oa == j) & (a < b))  # cluster j keeps pairs with i <= j
        out.append((np.minimum(a, b)[keep], np.maximum(a, b)[keep], s[keep]))
    if not out:
        return empty
    return tuple(np.concatenate(c) for c in zip(*out, strict=True))  # type: ignore[return-value]


def fit_partitions(rows: Any, n_parts: int, seed: int = 0) -> np.ndarray:
    """Step 1: ``n_parts`` spherical k-means centroids of a seeded sample of ``rows`` (an
    (n, d) array or row view), read in one pass."""
    from pairkit.index.kmeans import spherical_kmeans

    n = len(rows)
    rng = np.random.default_rng(seed)
    size = min(n, SAMPLE_PER_PART * n_parts)
    sample = np.sort(rng.choice(n, size=size, replace=False)) if size < n else np.arange(n)
    x = np.ascontiguousarray(rows[sample], dtype=np.float32)
    _, centroids = spherical_kmeans(x, n_parts, seed=seed)
    return centroids


def spans(n: int, step: int) -> list[tuple[int, int]]:
    return [(s, min(n, s + step)) for s in range(0, n, step)]


def partition(rows: Any, n_parts: int, map_blocks: MapBlocks, *, block_rows: int = 65_536,
              seed: int = 0) -> Partitions:
    """Steps 1-2 (module docstring), the blocks run by ``map_blocks``."""
    centroids = fit_partitions(rows, n_parts, seed)
    n = len(rows)
    own = np.empty(n, np.int32)
    radii = np.zeros(len(centroids), np.float32)
    top = 0.0
    blocks = spans(n, block_rows)
    for (b0, b1), (o, r, m) in zip(blocks, map_blocks(assign_block, RouteShared(
            rows, centroids), blocks), strict=True):
        own[b0:b1] = o
        np.maximum(radii, r, out=radii)
        top = max(top, m)
    return Partitions(centroids, own, radii, top)


def partitioned_pairs(rows: Any, threshold: float, map_blocks: MapBlocks, *,
                      rows_per_part: int = ROWS_PER_PART, batch_size: int = 4096,
                      block_rows: int = 65_536, seed: int = 0,
                      stats: dict[str, Any] | None = None) -> Iterator[Pairs]:
    """Every pair of ``rows`` (an (n, d) array or row view of L2-normalised rows) with
    inner product >= ``threshold``, once each as ``(low, high, score)``, cluster by
    cluster (module docstring). ``stats`` (when given) gets the clusters, the queries
    routed (rows x clusters) and the largest cluster."""
    n = len(rows)
    n_parts = parts_for(n, rows_per_part)
    block_rows = max(1024, min(block_rows, DISTANCES // n_parts))  # a block's distances
    parts = partition(rows, n_parts, map_blocks, block_rows=block_rows, seed=seed)
    blocks = spans(n, block_rows)
    shared = RouteShared(rows, parts.centroids, parts.radii, parts.reach(threshold))
    routed = [r for r in map_blocks(route_block, shared, blocks)]
    q_rows = np.concatenate([r[0] for r in routed]) if routed else np.zeros(0, np.int64)
    q_parts = np.concatenate([r[1] for r in routed]) if routed else np.zeros(0, np.int32)
    del routed
    order = np.argsort(q_parts, kind="stable")  # by cluster, rows ascending within
    q_rows, q_parts = q_rows[order], q_parts[order]
    q_bounds = np.searchsorted(q_parts, np.arange(len(parts.centroids) + 1))
    m_order = np.argsort(parts.own, kind="stable").astype(np.int64)
    m_bounds = np.searchsorted(parts.own[m_order], np.arange(len(parts.centroids) + 1))
    work = [(j, m_order[m_bounds[j]:m_bounds[j + 1]], q_rows[q_bounds[j]:q_bounds[j + 1]])
            for j in range(len(parts.centroids))]
    # the biggest clusters first: the last task to start is a small one
    work = [w for w in work if len(w[1])]
    work.sort(key=lambda w: -len(w[1]) * len(w[2]))
    if stats is not None:
        stats.update(parts=len(work), routed=len(q_rows), rows=n,
                     largest=max((len(w[1]) for w in work), default=0))
    yield from map_blocks(search_part, SearchShared(rows, parts.own, float(threshold),
                                                    batch_size), work)
