"""``eval --ray``: exact search over references sharded across Ray actors, top-k merged.

Each actor holds one contiguous shard of the references in an exact FAISS index (given
rows read on demand, :class:`~pairkit.core.row_view.RowView`, it reads its shard from the
store itself: the driver never holds the references) and answers
:func:`pairkit.index.search.knn_search` on it (ties at the k-th place by lowest id); the
driver merges the shards' lists by score, then id
(:func:`pairkit.index.search.sort_results`). Every member of the global top-k is in its
shard's top-k, so the merged list is the one a single exact search returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from pairkit.distributed import (
    RETRIES,
    Cluster,
    crash_marker,
    maybe_crash,
    require_ray,
    worker_error,
)


class ShardWorker:
    """One Ray actor: an exact index over one shard of the references (built on the
    first search, and again after a restart)."""

    def __init__(self, threads: int, crash: str | None) -> None:
        from pairkit.core.threads import configure

        configure(threads)
        self.crash = crash
        self.index: Any = None

    def search(self, box: list[Any], start: int, queries: np.ndarray, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` (nq, k) of the shard, ids global (``start`` added)."""
        from pairkit.index.open import exact_searcher
        from pairkit.index.search import knn_search

        maybe_crash(self.crash)
        if self.index is None:
            import ray

            rows = ray.get(box[0])  # an array, or rows this worker reads from the store
            self.index = exact_searcher(np.ascontiguousarray(np.asarray(rows),
                                                             dtype=np.float32)).index
        scores, ids = knn_search(queries, self.index, k)
        return scores, np.where(ids >= 0, ids + start, -1)


class RayShardedIndex:
    """An exact inner-product index over ``vectors`` (N, d) split across the workers of
    ``cluster``; ``search(queries, k)`` like :func:`~pairkit.index.search.knn_search`
    (best first, ties by id, -1/-inf padded). Close it (or let it go) to free the actors."""

    exact_ties = True  # knn_search hands it the queries as they are

    def __init__(self, vectors: Any, cluster: Cluster) -> None:
        from pairkit.core.row_view import is_view

        ray = require_ray()
        self.ntotal = len(vectors)
        shards = max(1, min(cluster.workers, self.ntotal))
        bounds = np.linspace(0, self.ntotal, shards + 1).astype(int)
        self.starts = bounds[:-1].tolist()
        # rows read on demand go as their view: each actor reads its own rows
        self.boxes = [[ray.put(vectors.subset(slice(a, b)) if is_view(vectors) else
                               np.ascontiguousarray(vectors[a:b], dtype=np.float32))]
                      for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        actor = ray.remote(ShardWorker).options(num_cpus=cluster.threads,
                                                max_restarts=RETRIES, max_task_retries=RETRIES)
        self.actors = [actor.remote(cluster.threads, crash_marker()) for _ in range(shards)]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import ray

        from pairkit.index.search import as_float32, sort_results

        q = ray.put(as_float32(queries))
        futures = [a.search.remote(box, start, q, k)
                   for a, box, start in zip(self.actors, self.boxes, self.starts, strict=True)]
        try:
            parts = ray.get(futures)
        except Exception as exc:
            raise worker_error(exc, "a search of a shard of the references") from None
        scores, ids = sort_results(np.concatenate([p[0] for p in parts], axis=1),
                                   np.concatenate([p[1] for p in parts], axis=1))
        return scores[:, :k], ids[:, :k]

    def close(self) -> None:
        import ray

        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        self.actors = []

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def sharded_index(vectors: Any, address: str) -> RayShardedIndex:
    """:class:`RayShardedIndex` over ``vectors`` on the cluster at ``address``."""
    from pairkit.distributed import connect

    return RayShardedIndex(vectors, connect(address))


class ShardedIndexFactory:
    """``eval --ray``: the ``index_factory`` of :func:`pairkit.eval.run.evaluate` whose
    indices are sharded on the cluster at ``address``. ``reads_store``: the references
    may stay in the store (:func:`pairkit.eval.command.load_sides`), each actor reads
    its own rows."""

    reads_store = True

    def __init__(self, address: str) -> None:
        self.address = address
        self.cluster: str | None = None  # the cluster's description, once a search ran

    def __call__(self, vectors: Any) -> RayShardedIndex:
        index = sharded_index(vectors, self.address)
        if self.cluster is None:
            from pairkit.distributed import connect

            self.cluster = connect(self.address).describe()  # joined already: no new start
        return index


def index_factory(address: str) -> Callable[[Any], RayShardedIndex]:
    """:class:`ShardedIndexFactory` for the cluster at ``address``."""
    return ShardedIndexFactory(address)
