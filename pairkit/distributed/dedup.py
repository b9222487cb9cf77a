"""``dedup --ray``: the near-duplicate pairs of blocks of queries found on Ray workers.

Each block runs :func:`pairkit.index.range_search.range_search_blocks` (the local path's
own search) on its rows against the whole set; the driver receives the blocks' pairs in
order and joins them by union-find (:func:`pairkit.mine.near_duplicates.
find_near_duplicates`), so the groups are the ones of a local run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from pairkit.distributed import Cluster

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _span_pairs(shared: tuple[np.ndarray, np.ndarray, float, int], span: tuple[int, int]
                ) -> Pairs:
    """The pairs of query rows ``span[0] .. span[1] - 1`` (global query ids)."""
    from pairkit.index.range_search import range_search_blocks

    queries, base, threshold, batch_size = shared
    b0, b1 = span
    parts = list(range_search_blocks(queries[b0:b1], base, threshold, batch_size=batch_size,
                                     device="cpu", backend="faiss"))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    a, b, s = (np.concatenate(p) for p in zip(*parts, strict=True))
    return a + b0, b, s


class RayPairs:
    """``dedup --ray``: a function with the signature of ``range_search_blocks`` whose
    blocks of queries run on the Ray cluster at ``address`` (joined at the first call;
    about ``blocks_per_worker`` blocks per worker, each at least ``batch_size`` rows; the
    search runs on the workers' CPUs)."""

    def __init__(self, address: str, blocks_per_worker: int = 4) -> None:
        from pairkit.distributed import require_ray

        require_ray()  # not installed: one line before any work
        self.address = address
        self.blocks_per_worker = blocks_per_worker
        self.cluster: Cluster | None = None

    def __call__(self, queries: np.ndarray, base: np.ndarray, threshold: float, *,
                 batch_size: int = 4096, **_: Any) -> Iterator[Pairs]:
        from pairkit.distributed import connect
        from pairkit.distributed.pool import ray_map_blocks

        if self.cluster is None:
            self.cluster = connect(self.address)
        n = len(queries)
        step = max(batch_size, math.ceil(n / (self.cluster.workers * self.blocks_per_worker)))
        spans = [(b0, min(n, b0 + step)) for b0 in range(0, n, step)]
        shared = (queries, base, float(threshold), batch_size)
        yield from ray_map_blocks(_span_pairs, shared, spans, self.cluster,
                                  "a near-duplicate search block")

    def describe(self) -> str | None:
        """The cluster the search ran on (None before the first call)."""
        return self.cluster.describe() if self.cluster is not None else None
