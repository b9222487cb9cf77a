"""Blocks of work on Ray actors: ``fn(shared, block)`` for every block, results in order.

``shared`` (the index, the vectors, the false-negative context: whatever every block
needs) goes into Ray's object store once; each actor deserialises it once (numpy arrays
zero-copy on the same node) and then runs blocks as Ray's :class:`~ray.util.ActorPool`
hands them out. An actor whose process dies is restarted by Ray and its block retried
(``max_restarts`` / ``max_task_retries``), so a killed worker costs time, not results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pairkit.dist import RETRIES, Cluster, crash_marker, maybe_crash, require_ray, worker_error


class BlockWorker:
    """One Ray actor: runs ``fn(shared, block)`` for blocks; ``shared`` is fetched from
    the object store on the first block (and again after a restart) and kept."""

    def __init__(self, fn: Callable[[Any, Any], Any], threads: int, crash: str | None) -> None:
        from pairkit.core.threads import configure

        configure(threads)
        self.fn = fn
        self.crash = crash
        self.shared: Any = None
        self.loaded = False

    def run(self, index: int, block: Any, box: list[Any]) -> tuple[int, Any]:
        maybe_crash(self.crash)
        if not self.loaded:
            import ray

            self.shared, self.loaded = ray.get(box[0]), True
        return index, self.fn(self.shared, block)


def ray_map_blocks(fn: Callable[[Any, Any], Any], shared: Any, blocks: list[Any],
                   cluster: Cluster, what: str = "a block") -> Iterator[Any]:
    """Yield ``fn(shared, block)`` for each of ``blocks``, in order, computed by up to
    ``cluster.workers`` actors of ``cluster.threads`` CPUs. A worker's error is raised
    here as one PairkitError line (``what`` names the work)."""
    ray = require_ray()
    from ray.util import ActorPool

    if not blocks:
        return
    ref = ray.put(shared)
    actor = ray.remote(BlockWorker).options(num_cpus=cluster.threads, max_restarts=RETRIES,
                                            max_task_retries=RETRIES)
    actors = [actor.remote(fn, cluster.threads, crash_marker())
              for _ in range(min(cluster.workers, len(blocks)))]
    box = [ref]  # nested, so Ray hands the reference over and the actor fetches it once
    try:
        pool = ActorPool(actors)
        # the first free actor takes the next block; results wait here for their turn
        results = pool.map_unordered(lambda a, job: a.run.remote(*job, box),
                                     list(enumerate(blocks)))
        done: dict[int, Any] = {}
        for turn in range(len(blocks)):
            while turn not in done:
                try:
                    index, result = next(results)
                except Exception as exc:
                    raise worker_error(exc, what) from None
                done[index] = result
            yield done.pop(turn)
    finally:
        for a in actors:
            ray.kill(a)


def block_mapper(cluster: Cluster, what: str) -> Callable[..., Iterator[Any]]:
    """``map_blocks(fn, shared, blocks)`` on ``cluster`` (the hook of
    :func:`pairkit.mine.hard_negatives.mine_negatives`)."""

    def map_blocks(fn: Callable[[Any, Any], Any], shared: Any,
                   blocks: list[Any]) -> Iterator[Any]:
        return ray_map_blocks(fn, shared, blocks, cluster, what)

    return map_blocks
