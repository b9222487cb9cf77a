"""``dedup --ray``: the near-duplicate pairs found on Ray workers.

Given the store's rows read on demand (``pairkit dedup --ray``: a
:class:`~pairkit.core.row_view.RowView` of one row per source), the workers read the rows
from the store themselves: the driver ships row ids, never vectors. The search runs by
k-means partitions when the counted plan says they cut the work enough
(:mod:`pairkit.index.partitioned_range`), else globally by tiles
(:mod:`pairkit.index.tiled_range`: pairs of blocks of rows, a worker holding at most two
blocks). By partitions, the routes stay with the workers (files in a scratch folder beside
the output: :func:`pairkit.index.partitioned_range.scratch_pairs`); the driver holds the
plan's counts. Given arrays, each block of queries runs
:func:`pairkit.index.range_search.range_search_blocks` (the local path's own search)
against the whole set. Either way the driver receives only pairs and joins them by
union-find (:func:`pairkit.mine.near_duplicates.find_near_duplicates`), so the groups
are the ones of a local run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pairkit.core.blocks_here import block_spans
from pairkit.core.row_view import is_view
from pairkit.distributed import Cluster

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]


class PairSearch:
    """What every block of a search shares: the queries and the base (arrays, or
    :class:`~pairkit.core.row_view.RowView`: rows the workers read from the store
    themselves, each process once), the threshold and the batch size."""

    def __init__(self, queries: Any, base: Any, threshold: float, batch_size: int) -> None:
        self.same = queries is base
        self.queries, self.base = queries, base
        self.threshold, self.batch_size = threshold, batch_size
        self.read: np.ndarray | None = None  # the base, read on this process

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "read": None}

    def base_rows(self) -> np.ndarray:
        if self.read is None:
            self.read = np.ascontiguousarray(np.asarray(self.base), dtype=np.float32)
        return self.read

    def query_rows(self, b0: int, b1: int) -> np.ndarray:
        return self.base_rows()[b0:b1] if self.same else np.asarray(self.queries[b0:b1])


def _span_pairs(shared: PairSearch, span: tuple[int, int]) -> Pairs:
    """The pairs of query rows ``span[0] .. span[1] - 1`` (global query ids)."""
    from pairkit.index.range_search import range_search_blocks

    b0, b1 = span
    parts = list(range_search_blocks(shared.query_rows(b0, b1), shared.base_rows(),
                                     shared.threshold, batch_size=shared.batch_size,
                                     device="cpu", backend="faiss"))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    a, b, s = (np.concatenate(p) for p in zip(*parts, strict=True))
    return a + b0, b, s


class RayPairs:
    """``dedup --ray``: a function with the signature of ``range_search_blocks`` whose
    blocks of queries run on the Ray cluster at ``address`` (joined at the first call;
    about ``blocks_per_worker`` blocks per worker, each at least ``batch_size`` rows; the
    search runs on the workers' CPUs). By partitions, the route blocks write their routes
    into a scratch folder under ``scratch`` (a folder or URL every worker sees, e.g. the
    output's: :func:`pairkit.index.route_files.scratch_beside`; None: the system's temp
    folder, one machine's, so on a cluster of several machines the search by tiles
    instead), removed when the search ends or fails."""

    def __init__(self, address: str, blocks_per_worker: int = 4,
                 rows_per_part: int | None = None, scratch: str | None = None) -> None:
        from pairkit.distributed import require_ray
        from pairkit.index.partitioned_range import ROWS_PER_PART

        require_ray()  # not installed: one line before any work
        self.address = address
        self.blocks_per_worker = blocks_per_worker
        self.rows_per_part = rows_per_part or ROWS_PER_PART
        self.scratch = scratch  # where the routes' folder goes (None: the temp folder)
        self.cluster: Cluster | None = None
        self.plan: str | None = None  # the partitions' plan, described

    def __call__(self, queries: Any, base: Any, threshold: float, *,
                 batch_size: int = 4096, progress: Callable[[int], None] | None = None,
                 on_start: Callable[[int], None] | None = None,
                 **_: Any) -> Iterator[Pairs]:
        """The pairs, block by block in order. ``queries`` and ``base``: arrays (shipped
        to the workers) or rows read on demand (:class:`~pairkit.core.row_view.RowView`:
        each worker reads them from the store; this process never holds them).
        The progress hook of the local search
        (:func:`pairkit.index.partitioned_range.pairs_here`): ``on_start(len(queries))``
        once the plan is made, then ``progress(m)`` as the blocks come back, adding up to
        it (by partitions a cluster's members; by tiles :func:`~pairkit.index.tiled_range.
        task_rows`; by blocks of queries their rows)."""
        from pairkit.distributed import connect
        from pairkit.distributed.pool import ray_map_blocks

        if self.cluster is None:
            self.cluster = connect(self.address)
        cluster = self.cluster
        n = len(queries)
        step = max(batch_size, math.ceil(n / (cluster.workers * self.blocks_per_worker)))
        if queries is base and is_view(base):  # the store's rows: by partitions if worth it
            from pairkit.distributed.pool import BlockPool
            from pairkit.index.partitioned_range import (
                plan_partitions,
                scratch_pairs,
                search_part,
            )
            from pairkit.index.tiled_range import tiled_pairs

            # one set of actors for the passes (assign, count, route, search or tiles)
            pool = BlockPool(search_part, cluster, "a block of the near-duplicate search",
                             ("faiss", "pairkit.index.partitioned_range",
                              "pairkit.index.tiled_range"))

            def on_cluster(fn: Any, shared: Any, blocks: list[Any]) -> Iterator[Any]:
                return pool.map(shared, blocks, fn, last=False)

            try:
                plan = plan_partitions(base, threshold, on_cluster,
                                       rows_per_part=self.rows_per_part, block_rows=step)
                self.plan = plan.describe()
                by_parts = plan.worth_it()
                if by_parts and self.scratch is None and cluster.nodes > 1:
                    # the routes' files would go to this machine's temp folder, which the
                    # other machines' workers can't read: the search that needs no files
                    by_parts = False
                    self.plan += (f"; not by partitions: their routes need a folder all "
                                  f"{cluster.nodes} machines see (give -o a shared folder "
                                  "or URL)")
                if on_start is not None:
                    on_start(n)
                if by_parts:  # the routes in files beside the output, never here
                    yield from scratch_pairs(base, plan, on_cluster, batch_size=batch_size,
                                             where=self.scratch, progress=progress)
                else:  # the global search, by tiles: no worker holds every row
                    tasks = cluster.workers * self.blocks_per_worker
                    self.plan = f"{self.plan}; {tiles_line(n, base.shape[1], tasks, batch_size)}"
                    yield from tiled_pairs(base, threshold, on_cluster, tasks=tasks,
                                           batch_size=batch_size, min_rows=batch_size,
                                           progress=progress)
                return
            finally:
                pool.close()
        spans = block_spans(n, step)
        shared = PairSearch(queries, base, float(threshold), batch_size)
        if on_start is not None:
            on_start(n)
        found = ray_map_blocks(_span_pairs, shared, spans, cluster,
                               "a near-duplicate search block")
        for (b0, b1), pairs in zip(spans, found, strict=True):
            yield pairs
            if progress is not None:
                progress(b1 - b0)

    def describe(self) -> str | None:
        """The cluster the search ran on, and its partitions (None before the first
        call)."""
        if self.cluster is None:
            return None
        return self.cluster.describe() + (f"; {self.plan}" if self.plan else "")


def tiles_line(n: int, dim: int, tasks: int, batch_size: int) -> str:
    """How :func:`pairkit.index.tiled_range.tiled_pairs` cuts ``n`` rows of width ``dim``
    for ``tasks`` tasks, in words (for the run's summary)."""
    from pairkit.index.tiled_range import tile_spans

    spans = tile_spans(n, dim, tasks=tasks, min_rows=batch_size)
    most = max((b - a for a, b in spans), default=0)
    r = len(spans)
    return (f"{r} block{'s' * (r != 1)} of at most {most} sources, "
            f"{r * (r + 1) // 2} tile{'s' * (r * (r + 1) // 2 != 1)}")
