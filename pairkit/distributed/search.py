"""``eval --ray``: exact search over references sharded across Ray actors, top-k merged.

Each actor holds one contiguous shard of the references in an exact FAISS index and
answers :func:`pairkit.index.search.knn_search` on it (ties at the k-th place by lowest
id); the driver merges the shards' lists by score, then id
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

            self.index = exact_searcher(ray.get(box[0])).index
        scores, ids = knn_search(queries, self.index, k)
        return scores, np.where(ids >= 0, ids + start, -1)


class RayShardedIndex:
    """An exact inner-product index over ``vectors`` (N, d) split across the workers of
    ``cluster``; ``search(queries, k)`` like :func:`~pairkit.index.search.knn_search`
    (best first, ties by id, -1/-inf padded). Close it (or let it go) to free the actors."""

    exact_ties = True  # knn_search hands it the queries as they are

    def __init__(self, vectors: np.ndarray, cluster: Cluster) -> None:
        ray = require_ray()
        self.ntotal = len(vectors)
        shards = max(1, min(cluster.workers, self.ntotal))
        bounds = np.linspace(0, self.ntotal, shards + 1).astype(int)
        self.starts = bounds[:-1].tolist()
        self.boxes = [[ray.put(np.ascontiguousarray(vectors[a:b], dtype=np.float32))]
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


def sharded_index(vectors: np.ndarray, address: str) -> RayShardedIndex:
    """:class:`RayShardedIndex` over ``vectors`` on the cluster at ``address``."""
    from pairkit.distributed import connect

    return RayShardedIndex(vectors, connect(address))


def index_factory(address: str) -> Callable[[np.ndarray], RayShardedIndex]:
    """``eval --ray``: the ``index_factory`` of :func:`pairkit.eval.run.evaluate` whose
    indices are sharded on the cluster at ``address``."""
    return lambda vectors: sharded_index(vectors, address)
