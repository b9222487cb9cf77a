"""Range search by partitions: every pair of rows with similarity >= a threshold, found
cluster by cluster, exactly, so that no process holds more than a cluster's rows.

What ``dedup`` runs on big stores, and ``dedup --ray`` (the semantic-deduplication layout
of SemDeDup, Abbas et al. 2023, and NeMo Curator: k-means partitions, each searched by
itself; here with the partitions' boundaries handled, so no pair is lost):

1. **Fit** spherical k-means (:func:`pairkit.index.kmeans.spherical_kmeans`, seeded) on
   a sample of the rows, read in one pass: ``k`` unit centroids ``c_j``.
2. **Assign** (per block of rows, where the blocks run): each row's cluster (highest inner
   product), its angle ``angle(x, c_j)`` to that centroid and its norm. Each cluster's
   radius ``R_j`` is the largest angle of its members; ``M`` the largest norm.
3. **Route** (per block): a row ``a`` is a query of cluster ``j`` when
   ``angle(a, c_j) <= R_j + phi``, where ``phi = arccos(t / M^2)`` bounds the angle of any
   pair with ``a . b >= t > 0`` (``cos(a, b) = a . b / (|a| |b|) >= t / M^2``). By the
   triangle inequality of angles on the sphere, ``angle(a, c_j) <= angle(a, b) +
   angle(b, c_j) <= phi + R_j`` for every member ``b`` of ``j`` that pairs with ``a``:
   every pair is found by the cluster of each of its rows. (A small slack covers float32
   rounding: a wider route costs time, never a pair.) Angles give tighter routes than
   chord lengths (``sin`` is concave: ``sin((x + y) / 2) <= sin(x / 2) + sin(y / 2)``).
4. **Search** (per cluster): the range search of the local path
   (:func:`pairkit.index.range_search.range_search_blocks`) of the cluster's queries
   against its members. A pair of rows in clusters ``i <= j`` is kept by cluster ``j``
   only (and within one cluster once), so each pair comes out once, as ``(low, high)``.

The work is the sum over clusters of queries x members, instead of N x N: about ``k``
times less when the routes spill little (well-separated clusters); when most rows are
near most centroids (high-dimensional rows with no cluster structure) it approaches the
global search, and stays exact either way. So :func:`plan_partitions` first counts the
routes (step 3 without keeping them) and :meth:`Plan.worth_it` says whether the search
by partitions does at least :data:`WORK_GAIN` times less work than the global one, with
at most :data:`MAX_ROUTES` routes per row (the routes are held where the plan is made);
if not, the callers search globally. ``map_blocks`` runs steps 2-4 (here:
:func:`map_here`; on Ray, the actors, each reading its rows from the store:
:class:`pairkit.core.row_view.RowView`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairkit.core.blocks_here import MapBlocks, block_spans, map_here

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]

ROWS_PER_PART = 4096  # rows per cluster on average, by default
SAMPLE_PER_PART = 64  # k-means trains on this many rows per cluster (a seeded sample)
MAX_PARTS = 4096  # clusters at most: beyond 16.7M rows they grow instead
SLACK = 5e-3  # radians added to every route: well over float32 rounding of the angles
DISTANCES = 1 << 24  # rows x clusters of distances per block (64 MB), at most
WORK_GAIN = 4.0  # partitions are searched when they cut the work at least this much
MAX_ROUTES = 16  # ... and route at most this many clusters per row (12 bytes a route)
LOCAL_MIN_ROWS = 50_000  # the local dedup tries partitions from this many rows


def parts_for(n: int, rows_per_part: int = ROWS_PER_PART) -> int:
    """How many clusters ``n`` rows are cut into: ``ceil(n / rows_per_part)``, between 1
    and :data:`MAX_PARTS` (so the k-means sample, read here, stays under 262,144 rows)."""
    return max(1, min(MAX_PARTS, math.ceil(n / max(1, rows_per_part))))


@dataclass
class Partitions:
    """Steps 1-2's results: unit ``centroids`` (k, d), each row's cluster ``own`` (n,),
    the clusters' radii (k,: the members' largest angle to their centroid, radians) and
    the rows' largest norm."""

    centroids: np.ndarray
    own: np.ndarray
    radii: np.ndarray
    max_norm: float

    def reach(self, threshold: float) -> float:
        """``phi`` of the module docstring (radians, with its slack): the largest angle of
        a pair at ``threshold``; pi (every route) for a threshold <= 0."""
        if threshold <= 0 or self.max_norm <= 0:
            return math.pi
        return math.acos(min(1.0, threshold / self.max_norm**2)) + SLACK

    def bounds(self, threshold: float) -> np.ndarray:
        """(k,) the cosine a row needs with each centroid to be routed to it:
        ``cos(min(pi, R_j + phi))``."""
        return np.cos(np.minimum(math.pi, self.radii.astype(np.float64) + SLACK
                                 + self.reach(threshold))).astype(np.float32)


@dataclass
class RouteShared:
    """What the assign and route blocks share: the rows, the centroids, and (routing)
    each centroid's cosine bound."""

    rows: Any
    centroids: np.ndarray
    bounds: np.ndarray | None = None


def centroid_cosines(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(cos(x, c) (m, k), ||x|| (m,))`` for float32 rows ``x`` (m, d) and unit
    centroids (a zero row has cosine 0 with every centroid)."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    dots = x @ centroids.T
    return dots / np.maximum(norms, 1e-30)[:, None], norms


def assign_block(shared: RouteShared, span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray,
                                                                       float]:
    """Step 2 for rows ``span``: ``(own (m,) int32, largest angle per cluster (k,),
    largest norm)``."""
    x = np.ascontiguousarray(shared.rows[slice(*span)], dtype=np.float32)
    cos, norms = centroid_cosines(x, shared.centroids)
    own = np.argmax(cos, axis=1)
    radii = np.zeros(len(shared.centroids), np.float32)
    # the angle from the chord, 2 asin(|x/|x| - c| / 2): exact for small angles too
    chord = np.linalg.norm(x / np.maximum(norms, 1e-30)[:, None] - shared.centroids[own],
                           axis=1)
    angle = (2 * np.arcsin(np.minimum(1.0, chord / 2))).astype(np.float32)
    np.maximum.at(radii, own, angle)
    return own.astype(np.int32), radii, float(norms.max()) if len(x) else 0.0


def route_block(shared: RouteShared, span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Step 3 for rows ``span``: ``(rows, clusters)``, every (row, cluster) where the row
    is a query of the cluster (its own cluster included)."""
    assert shared.bounds is not None
    x = np.ascontiguousarray(shared.rows[slice(*span)], dtype=np.float32)
    cos, _ = centroid_cosines(x, shared.centroids)
    rows, parts = np.nonzero(cos >= shared.bounds[None, :])
    return rows.astype(np.int64) + span[0], parts.astype(np.int32)


def count_block(shared: RouteShared, span: tuple[int, int]) -> np.ndarray:
    """Step 3 counted, not kept: (k,) how many rows of ``span`` each cluster is queried
    by."""
    _, parts = route_block(shared, span)
    return np.bincount(parts, minlength=len(shared.centroids))


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


def partition(rows: Any, n_parts: int, map_blocks: MapBlocks, *, block_rows: int = 65_536,
              seed: int = 0) -> Partitions:
    """Steps 1-2 (module docstring), the blocks run by ``map_blocks``."""
    centroids = fit_partitions(rows, n_parts, seed)
    n = len(rows)
    own = np.empty(n, np.int32)
    radii = np.zeros(len(centroids), np.float32)
    top = 0.0
    blocks = block_spans(n, block_rows)
    for (b0, b1), (o, r, m) in zip(blocks, map_blocks(assign_block, RouteShared(
            rows, centroids), blocks), strict=True):
        own[b0:b1] = o
        np.maximum(radii, r, out=radii)
        top = max(top, m)
    return Partitions(centroids, own, radii, top)


@dataclass
class Plan:
    """Steps 1-3 counted: the partitions, the threshold, the blocks, and per cluster its
    members and the rows routed to it (its queries)."""

    parts: Partitions
    threshold: float
    blocks: list[tuple[int, int]]
    members: np.ndarray  # (k,) int64
    queries: np.ndarray  # (k,) int64

    @property
    def rows(self) -> int:
        return int(self.members.sum())

    @property
    def work(self) -> float:
        """Query-member comparisons of the search by partitions."""
        return float(self.members.astype(np.float64) @ self.queries)

    def worth_it(self) -> bool:
        """Whether to search by partitions: at least :data:`WORK_GAIN` times less work
        than the global search's ``n^2``, and at most :data:`MAX_ROUTES` routes per row."""
        n = self.rows
        return (len(self.members) > 1 and self.work * WORK_GAIN <= float(n) * n
                and int(self.queries.sum()) <= MAX_ROUTES * n)

    def stats(self) -> dict[str, Any]:
        """What describes the plan (for the run's summary)."""
        n = max(1, self.rows)
        return {"parts": int((self.members > 0).sum()), "rows": self.rows,
                "routed": int(self.queries.sum()), "largest": int(self.members.max()),
                "work_share": round(self.work / (float(n) * n), 4),
                "partitioned": self.worth_it()}

    def describe(self) -> str:
        s = self.stats()
        how = ("searched by partitions" if s["partitioned"] else
               "searched globally (partitions would not cut the work enough)")
        return (f"{s['parts']} k-means partitions of at most {s['largest']} sources, "
                f"{s['routed'] / max(1, s['rows']):.2f} searched per source, "
                f"{s['work_share']:.1%} of the global search's comparisons: {how}")


def plan_partitions(rows: Any, threshold: float, map_blocks: MapBlocks, *,
                    rows_per_part: int = ROWS_PER_PART, block_rows: int = 65_536,
                    seed: int = 0) -> Plan:
    """Steps 1-2, and step 3 counted (module docstring): what :meth:`Plan.worth_it`
    decides on and :func:`plan_pairs` searches."""
    n = len(rows)
    n_parts = parts_for(n, rows_per_part)
    block_rows = max(1024, min(block_rows, DISTANCES // n_parts))  # a block's distances
    parts = partition(rows, n_parts, map_blocks, block_rows=block_rows, seed=seed)
    blocks = block_spans(n, block_rows)
    shared = RouteShared(rows, parts.centroids, parts.bounds(threshold))
    queries = np.zeros(len(parts.centroids), np.int64)
    for counted in map_blocks(count_block, shared, blocks):
        queries += counted
    members = np.bincount(parts.own, minlength=len(parts.centroids)).astype(np.int64)
    return Plan(parts, float(threshold), blocks, members, queries)


def plan_pairs(rows: Any, plan: Plan, map_blocks: MapBlocks, *,
               batch_size: int = 4096) -> Iterator[Pairs]:
    """Steps 3-4 of ``plan`` (made by :func:`plan_partitions` on the same ``rows``): every
    pair at the plan's threshold, once each as ``(low, high, score)``."""
    parts = plan.parts
    k = len(parts.centroids)
    shared = RouteShared(rows, parts.centroids, parts.bounds(plan.threshold))
    q_rows = np.empty(int(plan.queries.sum()), np.int64)  # by cluster, rows ascending
    q_bounds = np.r_[0, np.cumsum(plan.queries)]
    filled = q_bounds[:-1].copy()
    for r, p in map_blocks(route_block, shared, plan.blocks):
        order = np.argsort(p, kind="stable")
        r, p = r[order], p[order]
        cut = np.searchsorted(p, np.arange(k + 1))
        for j in np.flatnonzero(np.diff(cut)):
            got = r[cut[j]:cut[j + 1]]
            if filled[j] + len(got) > q_bounds[j + 1]:
                break  # more routes than counted: refused below
            q_rows[filled[j]:filled[j] + len(got)] = got
            filled[j] += len(got)
    if not np.array_equal(filled, q_bounds[1:]):  # the two passes must agree, exactly
        from pairkit.errors import PairkitError

        raise PairkitError("the partitioned search routed other rows than it counted "
                           "(the blocks' arithmetic differed between the passes)")
    m_order = np.argsort(parts.own, kind="stable").astype(np.int64)
    m_bounds = np.r_[0, np.cumsum(plan.members)]
    work = [(j, m_order[m_bounds[j]:m_bounds[j + 1]], q_rows[q_bounds[j]:q_bounds[j + 1]])
            for j in range(k) if plan.members[j]]
    # the biggest clusters first: the last task to start is a small one
    work.sort(key=lambda w: -len(w[1]) * len(w[2]))
    yield from map_blocks(search_part, SearchShared(rows, parts.own, plan.threshold,
                                                    batch_size), work)


def pairs_here(queries: Any, base: Any, threshold: float, *, batch_size: int = 4096,
               device: str = "cpu", backend: str = "faiss",
               **_: Any) -> Iterator[Pairs]:
    """:func:`pairkit.index.range_search.range_search_blocks` for a search of the rows
    against themselves (``queries is base``) in this process: by partitions when there
    are at least :data:`LOCAL_MIN_ROWS` rows, the search runs on FAISS's CPU search, and
    the plan is :meth:`Plan.worth_it`, else the global search. The pairs are the same
    (each ``(low, high)`` once here; the global search yields both orders)."""
    from pairkit.index.backend import resolve_backend
    from pairkit.index.range_search import range_search_blocks

    if queries is base and len(base) >= LOCAL_MIN_ROWS:
        where = resolve_backend(backend, device)
        if where.name == "faiss" and not where.gpu:
            plan = plan_partitions(base, threshold, map_here, rows_per_part=ROWS_PER_PART)
            if plan.worth_it():
                yield from plan_pairs(base, plan, map_here, batch_size=batch_size)
                return
    yield from range_search_blocks(queries, base, threshold, batch_size=batch_size,
                                   device=device, backend=backend)
