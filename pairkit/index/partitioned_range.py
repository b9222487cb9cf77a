"""Range search by partitions: every pair of rows with similarity >= a threshold, found
cluster by cluster, exactly, so that no process holds more than a cluster's rows.

What ``dedup`` runs on big stores, and ``dedup --ray`` (the semantic-deduplication layout
of SemDeDup, Abbas et al. 2023, and NeMo Curator: k-means partitions, each searched by
itself; here with the partitions' boundaries handled, so no pair is lost):

1. **Fit** spherical k-means (:func:`pairkit.index.kmeans.spherical_kmeans`, seeded) on
   a sample of the rows, read in one pass: ``k`` unit centroids ``c_j``.
2. **Assign** (per block of rows, where the blocks run): each row's cluster (highest inner
   product), its angle ``angle(x, c_j)`` to that centroid and its norm. Each cluster's
   radius ``R_j`` is the largest angle of its members; ``M`` the largest norm. A block
   returns its clusters' member counts, radii and largest norm: no row's cluster.
3. **Route** (per block): a row ``a`` is a query of cluster ``j`` when
   ``angle(a, c_j) <= R_j + phi``, where ``phi = arccos(t / M^2)`` bounds the angle of any
   pair with ``a . b >= t > 0`` (``cos(a, b) = a . b / (|a| |b|) >= t / M^2``). By the
   triangle inequality of angles on the sphere, ``angle(a, c_j) <= angle(a, b) +
   angle(b, c_j) <= phi + R_j`` for every member ``b`` of ``j`` that pairs with ``a``:
   every pair is found by the cluster of each of its rows. (A small slack covers float32
   rounding: a wider route costs time, never a pair.) Angles give tighter routes than
   chord lengths (``sin`` is concave: ``sin((x + y) / 2) <= sin(x / 2) + sin(y / 2)``).
   A route block puts its routes, sorted by cluster, each with its row's own cluster, where
   the searches read them (:mod:`pairkit.index.route_files`: memory here, files on Ray)
   and returns its counts only; the count pass's counts (equal to them, block by block)
   locate each cluster's slice of each block. It recomputes each row's cluster by the
   assign pass's arithmetic and checks the row within that cluster's radius and routed to
   it: else the run stops.
4. **Search** (per cluster): the range search of the local path
   (:func:`pairkit.index.range_search.range_search_blocks`) of the cluster's queries
   (read from the routes) against its members (the queries whose own cluster it is). A
   pair of rows in clusters ``i <= j`` is kept by cluster ``j`` only (and within one
   cluster once), so each pair comes out once, as ``(low, high)``.

The work is the sum over clusters of queries x members, instead of N x N: about ``k``
times less when the routes spill little (well-separated clusters); when most rows are
near most centroids (high-dimensional rows with no cluster structure) it approaches the
global search, and stays exact either way. So :func:`plan_partitions` first counts the
routes (step 3 without keeping them) and :meth:`Plan.worth_it` says whether the search
by partitions does at least :data:`WORK_GAIN` times less work than the global one, with
at most :data:`MAX_ROUTES` routes per row;
if not, the callers search globally. ``map_blocks`` runs steps 2-4 (here:
:func:`map_here`; on Ray, the actors, each reading its rows from the store:
:class:`pairkit.core.row_view.RowView`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairkit.core.blocks_here import MapBlocks, block_spans, map_here
from pairkit.index.route_files import ROUTE, RoutesHere

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]

ROWS_PER_PART = 4096  # rows per cluster on average, by default
SAMPLE_PER_PART = 64  # k-means trains on this many rows per cluster (a seeded sample)
MAX_PARTS = 4096  # clusters at most: beyond 16.7M rows they grow instead
SLACK = 5e-3  # radians added to every route: well over float32 rounding of the angles
DISTANCES = 1 << 24  # rows x clusters of distances per block (64 MB), at most
MAX_BLOCKS = 1024  # blocks at most: the plan's counts (blocks x clusters) under 32 MB
MIN_CHUNK = 1024  # rows of a block of distances, at least
WORK_GAIN = 4.0  # partitions are searched when they cut the work at least this much
MAX_ROUTES = 16  # ... and route at most this many clusters per row (12 bytes a route)
LOCAL_MIN_ROWS = 50_000  # the local dedup tries partitions from this many rows


def parts_for(n: int, rows_per_part: int = ROWS_PER_PART) -> int:
    """How many clusters ``n`` rows are cut into: ``ceil(n / rows_per_part)``, between 1
    and :data:`MAX_PARTS` (so the k-means sample, read here, stays under 262,144 rows)."""
    return max(1, min(MAX_PARTS, math.ceil(n / max(1, rows_per_part))))


@dataclass
class Partitions:
    """Steps 1-2's results: unit ``centroids`` (k, d), the clusters' member counts (k,),
    their radii (k,: the members' largest angle to their centroid, radians) and the rows'
    largest norm. No row's cluster: the route pass computes it again where it runs."""

    centroids: np.ndarray
    members: np.ndarray
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
    """What the assign and route blocks share: the rows, the centroids, (routing) each
    centroid's cosine bound and the clusters' radii (every row checked within its own),
    and the rows of a block of distances (``chunk``: the same in every pass, so that
    every pass computes a row's distances by the same arithmetic)."""

    rows: Any
    centroids: np.ndarray
    bounds: np.ndarray | None = None
    radii: np.ndarray | None = None
    chunk: int = 1 << 62


def centroid_cosines(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(cos(x, c) (m, k), ||x|| (m,))`` for float32 rows ``x`` (m, d) and unit
    centroids (a zero row has cosine 0 with every centroid)."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    dots = x @ centroids.T
    return dots / np.maximum(norms, 1e-30)[:, None], norms


def span_cosines(shared: RouteShared, span: tuple[int, int]
                 ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Rows ``span``, ``shared.chunk`` rows at a time: ``(first row, x (m, d),
    cos(x, c) (m, k), ||x|| (m,))``."""
    for c0, c1 in block_spans(span[1] - span[0], shared.chunk):
        x = np.ascontiguousarray(shared.rows[span[0] + c0:span[0] + c1], dtype=np.float32)
        yield (span[0] + c0, x, *centroid_cosines(x, shared.centroids))


def own_angles(x: np.ndarray, cos: np.ndarray, norms: np.ndarray,
               centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(own (m,) int32, angle (m,) float32)``: each row's cluster (highest cosine) and
    its angle to that centroid."""
    own = np.argmax(cos, axis=1)
    # the angle from the chord, 2 asin(|x/|x| - c| / 2): exact for small angles too
    chord = np.linalg.norm(x / np.maximum(norms, 1e-30)[:, None] - centroids[own], axis=1)
    angle = (2 * np.arcsin(np.minimum(1.0, chord / 2))).astype(np.float32)
    return own.astype(np.int32), angle


def assign_block(shared: RouteShared, span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray,
                                                                       float]:
    """Step 2 for rows ``span``: ``(members per cluster (k,) int64, largest angle per
    cluster (k,), largest norm)``."""
    k = len(shared.centroids)
    members = np.zeros(k, np.int64)
    radii = np.zeros(k, np.float32)
    top = 0.0
    for _, x, cos, norms in span_cosines(shared, span):
        own, angle = own_angles(x, cos, norms, shared.centroids)
        members += np.bincount(own, minlength=k)
        np.maximum.at(radii, own, angle)
        top = max(top, float(norms.max()) if len(x) else 0.0)
    return members, radii, top


@dataclass
class BlockRoutes:
    """Step 3 for a block of rows: every (row, cluster) where the row is a query of the
    cluster (its own cluster included), rows ascending; each row's own cluster; and
    whether every row lies within its cluster's radius (when the radii are given) and
    is routed to it."""

    rows: np.ndarray  # (r,) int64, global row ids
    parts: np.ndarray  # (r,) int32
    own: np.ndarray  # (m,) int32, for the block's rows in order
    within: bool


def route_block(shared: RouteShared, span: tuple[int, int]) -> BlockRoutes:
    """Step 3 for rows ``span`` (see :class:`BlockRoutes`)."""
    assert shared.bounds is not None
    rows, parts, owns, within = [], [], [], True
    for c0, x, cos, norms in span_cosines(shared, span):
        routed = cos >= shared.bounds[None, :]
        r, p = np.nonzero(routed)
        own, angle = own_angles(x, cos, norms, shared.centroids)
        if len(own):  # a zero row has no pair at a threshold > 0, nor a route then
            within = within and bool(routed[np.arange(len(own)), own][norms > 0].all())
            if shared.radii is not None:
                within = within and bool((angle <= shared.radii[own]).all())
        rows.append(r.astype(np.int64) + c0)
        parts.append(p.astype(np.int32))
        owns.append(own)
    if not rows:
        return BlockRoutes(np.zeros(0, np.int64), np.zeros(0, np.int32),
                           np.zeros(0, np.int32), True)
    return BlockRoutes(np.concatenate(rows), np.concatenate(parts), np.concatenate(owns),
                       within)


def count_block(shared: RouteShared, span: tuple[int, int]) -> np.ndarray:
    """Step 3 counted, not kept: (k,) how many rows of ``span`` each cluster is queried
    by."""
    return np.bincount(route_block(shared, span).parts, minlength=len(shared.centroids))


@dataclass
class RouteWrite:
    """What the route blocks share: the routing, and where the routes go
    (:mod:`pairkit.index.route_files`)."""

    route: RouteShared
    routes: Any


def write_routes(shared: RouteWrite, block: tuple[int, tuple[int, int]]
                 ) -> tuple[np.ndarray, np.ndarray, bool]:
    """Step 3 for block ``(number, span)``: its routes put into ``shared.routes`` as
    :data:`~pairkit.index.route_files.ROUTE` records sorted by cluster (rows ascending
    within one); returns counts only: ``(routes per cluster (k,), members per cluster
    (k,), every row within its cluster's radius and routed to it)``."""
    number, span = block
    got = route_block(shared.route, span)
    k = len(shared.route.centroids)
    order = np.argsort(got.parts, kind="stable")
    records = np.empty(len(order), ROUTE)
    records["row"] = got.rows[order]
    records["own"] = got.own[records["row"] - span[0]]
    shared.routes.put(number, records)
    return (np.bincount(got.parts, minlength=k), np.bincount(got.own, minlength=k),
            got.within)


@dataclass
class SearchShared:
    """What the cluster searches share: the rows, where the routes are, the threshold
    and the search's batch size."""

    rows: Any
    routes: Any
    threshold: float
    batch_size: int


# a cluster's search: (cluster, route blocks, its slice's start and length in each)
Work = tuple[int, np.ndarray, np.ndarray, np.ndarray]


def search_part(shared: SearchShared, part: Work) -> Pairs:
    """Step 4 for one cluster ``(j, blocks, starts, counts)``: its queries read from the
    route blocks' slices, its members those of them whose own cluster is ``j``; its
    pairs, each ``(low, high, score)`` once (module docstring)."""
    from pairkit.index.range_search import range_search_blocks

    j, blocks, starts, counts = part
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    records = shared.routes.read(blocks, starts, counts)
    queries = records["row"].astype(np.int64)  # ascending: the blocks in row order
    q_own = records["own"].astype(np.int32)
    is_member = q_own == j
    if not is_member.any():
        return empty
    members = queries[is_member]
    # one read of the cluster's rows: its members are among its queries
    qx = np.ascontiguousarray(shared.rows[queries], dtype=np.float32)
    base = qx[is_member]
    out = []
    for qa, mb, s in range_search_blocks(qx, base, shared.threshold,
                                         batch_size=shared.batch_size, device="cpu",
                                         backend="faiss"):
        a, b = queries[qa], members[mb]
        oa = q_own[qa]
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
              chunk: int | None = None, seed: int = 0) -> Partitions:
    """Steps 1-2 (module docstring), the blocks of ``block_rows`` rows run by
    ``map_blocks``, each computing its distances ``chunk`` rows at a time (None: whole)."""
    centroids = fit_partitions(rows, n_parts, seed)
    k = len(centroids)
    members = np.zeros(k, np.int64)
    radii = np.zeros(k, np.float32)
    top = 0.0
    shared = RouteShared(rows, centroids, chunk=chunk or block_rows)
    for m, r, t in map_blocks(assign_block, shared, block_spans(len(rows), block_rows)):
        members += m
        np.maximum(radii, r, out=radii)
        top = max(top, t)
    return Partitions(centroids, members, radii, top)


@dataclass
class Plan:
    """Steps 1-3 counted: the partitions, the threshold, the blocks (each computing its
    distances ``chunk`` rows at a time) and per block and cluster the rows routed
    (``routed``: where each cluster's slice of each block's routes lies); per cluster its
    members and the rows routed to it (its queries) follow."""

    parts: Partitions
    threshold: float
    blocks: list[tuple[int, int]]
    chunk: int
    routed: np.ndarray  # (blocks, k) int64

    @property
    def members(self) -> np.ndarray:
        """(k,) int64: each cluster's members."""
        return self.parts.members

    @property
    def queries(self) -> np.ndarray:
        """(k,) int64: the rows routed to each cluster."""
        return self.routed.sum(axis=0)

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
        parts = f"{s['parts']} k-means partition{'s' if s['parts'] != 1 else ''}"
        return (f"{parts} of at most {s['largest']} sources, "
                f"{s['routed'] / max(1, s['rows']):.2f} searched per source, "
                f"{s['work_share']:.1%} of the global search's comparisons: {how}")

    def work_list(self) -> list[Work]:
        """Step 4's tasks: per cluster with members, the blocks that route rows to it,
        where its slice of each block's routes starts and its length; the biggest
        clusters (members x queries) first, so the last task to start is a small one."""
        starts = np.cumsum(self.routed, axis=1) - self.routed  # a block's, by cluster
        work: list[Work] = []
        for j in np.flatnonzero(self.members):
            counts = self.routed[:, j]
            blocks = np.flatnonzero(counts)
            work.append((int(j), blocks, starts[blocks, j], counts[blocks]))
        queries = self.queries
        work.sort(key=lambda w: -int(self.members[w[0]]) * int(queries[w[0]]))
        return work


def plan_partitions(rows: Any, threshold: float, map_blocks: MapBlocks, *,
                    rows_per_part: int = ROWS_PER_PART, block_rows: int = 65_536,
                    seed: int = 0) -> Plan:
    """Steps 1-2, and step 3 counted (module docstring): what :meth:`Plan.worth_it`
    decides on and :func:`plan_pairs` searches. The blocks are ``block_rows`` rows, or
    fewer so that a block of distances stays under :data:`DISTANCES`, or more (a multiple
    of that) so that there are at most :data:`MAX_BLOCKS` of them."""
    n = len(rows)
    n_parts = parts_for(n, rows_per_part)
    chunk = max(MIN_CHUNK, min(block_rows, DISTANCES // n_parts))  # a block's distances
    step = chunk * max(1, math.ceil(n / (MAX_BLOCKS * chunk)))
    parts = partition(rows, n_parts, map_blocks, block_rows=step, chunk=chunk, seed=seed)
    blocks = block_spans(n, step)
    shared = RouteShared(rows, parts.centroids, parts.bounds(threshold), chunk=chunk)
    routed = np.zeros((len(blocks), len(parts.centroids)), np.int64)
    for i, counted in enumerate(map_blocks(count_block, shared, blocks)):
        routed[i] = counted
    return Plan(parts, float(threshold), blocks, chunk, routed)


def refused() -> Exception:
    from pairkit.errors import PairkitError

    return PairkitError("the partitioned search routed other rows than it counted (the "
                        "blocks' arithmetic differed between the passes)")


def plan_pairs(rows: Any, plan: Plan, map_blocks: MapBlocks, *, batch_size: int = 4096,
               routes: Any = None, progress: Callable[[int], None] | None = None
               ) -> Iterator[Pairs]:
    """Steps 3-4 of ``plan`` (made by :func:`plan_partitions` on the same ``rows``): every
    pair at the plan's threshold, once each as ``(low, high, score)``. The route blocks
    put their routes into ``routes`` (:mod:`pairkit.index.route_files`; None: a
    :class:`~pairkit.index.route_files.RoutesHere`, this process's memory) and return
    their counts only, which must be the plan's, block by block; this process holds the
    plan's counts, never the routes. ``progress(m)`` after each cluster's pairs (``m``:
    its members; they add up to the plan's rows)."""
    parts = plan.parts
    k = len(parts.centroids)
    routes = RoutesHere() if routes is None else routes
    shared = RouteShared(rows, parts.centroids, parts.bounds(plan.threshold), parts.radii,
                         plan.chunk)
    members = np.zeros(k, np.int64)
    for i, (routed, owned, within) in enumerate(map_blocks(
            write_routes, RouteWrite(shared, routes), list(enumerate(plan.blocks)))):
        if not within or not np.array_equal(routed, plan.routed[i]):
            raise refused()  # the two passes must agree, exactly
        members += owned
    if not np.array_equal(members, plan.members):
        raise refused()
    work = plan.work_list()
    found = map_blocks(search_part, SearchShared(rows, routes, plan.threshold, batch_size),
                       work)
    for (j, *_), pairs in zip(work, found, strict=True):
        yield pairs
        if progress is not None:  # a cluster's members: in any order, they add up to n
            progress(int(plan.members[j]))


def scratch_pairs(rows: Any, plan: Plan, map_blocks: MapBlocks, *, batch_size: int = 4096,
                  where: str | None = None,
                  progress: Callable[[int], None] | None = None) -> Iterator[Pairs]:
    """:func:`plan_pairs` with the routes in files of a new scratch folder under
    ``where`` (a folder or URL every block's process sees; None: the temp folder:
    :func:`pairkit.index.route_files.scratch_routes`), removed at the end: after the last
    pair, when a block fails, or when the caller stops early. ``progress``: plan_pairs'."""
    from pairkit.index.route_files import scratch_routes

    routes = scratch_routes(where)
    try:
        yield from plan_pairs(rows, plan, map_blocks, batch_size=batch_size, routes=routes,
                              progress=progress)
    finally:
        routes.remove()


def pairs_here(queries: Any, base: Any, threshold: float, *, batch_size: int = 4096,
               device: str = "cpu", backend: str = "faiss",
               progress: Callable[[int], None] | None = None,
               on_start: Callable[[int], None] | None = None,
               **_: Any) -> Iterator[Pairs]:
    """:func:`pairkit.index.range_search.range_search_blocks` for a search of the rows
    against themselves (``queries is base``) in this process: by partitions when there
    are at least :data:`LOCAL_MIN_ROWS` rows, the search runs on FAISS's CPU search, and
    the plan is :meth:`Plan.worth_it`, else the global search. The pairs are the same
    (each ``(low, high)`` once here; the global search yields both orders). The progress
    hook (``on_start(len(queries))``, then ``progress(m)`` adding up to it) is
    :func:`~pairkit.index.range_search.range_search_blocks`'; the plan (k-means and the
    route count) runs before ``on_start``."""
    from pairkit.index.backend import resolve_backend
    from pairkit.index.range_search import range_search_blocks

    if queries is base and len(base) >= LOCAL_MIN_ROWS:
        where = resolve_backend(backend, device)
        if where.name == "faiss" and not where.gpu:
            plan = plan_partitions(base, threshold, map_here, rows_per_part=ROWS_PER_PART)
            if plan.worth_it():
                if on_start is not None:
                    on_start(len(queries))
                yield from plan_pairs(base, plan, map_here, batch_size=batch_size,
                                      progress=progress)
                return
    yield from range_search_blocks(queries, base, threshold, batch_size=batch_size,
                                   device=device, backend=backend, progress=progress,
                                   on_start=on_start)
