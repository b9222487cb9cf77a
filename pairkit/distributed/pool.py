"""Blocks of work on Ray actors: ``fn(shared, block)`` for every block, results in order.

``shared`` (the index, the vectors, the false-negative context: whatever every block
needs) goes into Ray's object store once; each actor deserialises it once (numpy arrays
zero-copy on the same node) and then runs blocks as Ray's :class:`~ray.util.ActorPool`
hands them out. An actor whose process dies is restarted by Ray and its block retried
(``max_restarts`` / ``max_task_retries``), so a killed worker costs time, not results.

The actors can be started before ``shared`` exists (:class:`BlockPool`): their processes
start and import what the blocks need while this process is still loading the store and
building the index.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from pairkit.distributed import (
    RETRIES,
    Cluster,
    crash_marker,
    maybe_crash,
    require_ray,
    worker_error,
)


class BlockWorker:
    """One Ray actor: runs ``fn(shared, block)`` for blocks; ``shared`` is fetched from
    the object store on the first block (and again after a restart) and kept."""

    def __init__(self, fn: Callable[[Any, Any], Any], threads: int, crash: str | None,
                 modules: tuple[str, ...] = ()) -> None:
        from pairkit.core.threads import configure

        configure(threads)
        for name in modules:  # imported now, while the driver still prepares the blocks
            importlib.import_module(name)
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


class BlockPool:
    """``cluster.workers`` actors of ``cluster.threads`` CPUs for ``fn``, started now;
    :meth:`map` runs the blocks on them once and then stops them (so does :meth:`close`)."""

    def __init__(self, fn: Callable[[Any, Any], Any], cluster: Cluster, what: str,
                 modules: tuple[str, ...] = ()) -> None:
        ray = require_ray()
        self.what = what
        actor = ray.remote(BlockWorker).options(num_cpus=cluster.threads,
                                                max_restarts=RETRIES, max_task_retries=RETRIES)
        self.actors = [actor.remote(fn, cluster.threads, crash_marker(), modules)
                       for _ in range(cluster.workers)]

    def map(self, shared: Any, blocks: list[Any]) -> Iterator[Any]:
        """Yield ``fn(shared, block)`` for each of ``blocks``, in order. A worker's error
        is raised here as one PairkitError line."""
        import ray
        from ray.util import ActorPool

        try:
            if not blocks:
                return
            box = [ray.put(shared)]  # nested: Ray hands the reference over, the actor fetches
            pool = ActorPool(self.actors[:len(blocks)])
            # the first free actor takes the next block; results wait here for their turn
            results = pool.map_unordered(lambda a, job: a.run.remote(*job, box),
                                         list(enumerate(blocks)))
            done: dict[int, Any] = {}
            for turn in range(len(blocks)):
                while turn not in done:
                    try:
                        index, result = next(results)
                    except Exception as exc:
                        raise worker_error(exc, self.what) from None
                    done[index] = result
                yield done.pop(turn)
        finally:
            self.close()

    def close(self) -> None:
        import ray

        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        self.actors = []


def ray_map_blocks(fn: Callable[[Any, Any], Any], shared: Any, blocks: list[Any],
                   cluster: Cluster, what: str = "a block",
                   modules: tuple[str, ...] = ()) -> Iterator[Any]:
    """Yield ``fn(shared, block)`` for each of ``blocks``, in order, computed by up to
    ``cluster.workers`` actors of ``cluster.threads`` CPUs (``what`` names the work in
    an error)."""
    if not blocks:
        return iter(())
    return BlockPool(fn, cluster, what, modules).map(shared, blocks)


MINE_MODULES = ("faiss", "pairkit.index.search", "pairkit.mine.blocks")


class BlockMapper:
    """``map_blocks(fn, shared, blocks)`` on a cluster (the hook of
    :func:`pairkit.mine.blocks.mine_block`). With ``warm`` (the ``fn`` the
    blocks will run), the actors start now and serve the first call; :meth:`close` stops
    them if no call came."""

    def __init__(self, cluster: Cluster, what: str,
                 warm: Callable[[Any, Any], Any] | None = None,
                 modules: tuple[str, ...] = MINE_MODULES) -> None:
        self.cluster, self.what, self.warm, self.modules = cluster, what, warm, modules
        self.pool = BlockPool(warm, cluster, what, modules) if warm is not None else None

    def __call__(self, fn: Callable[[Any, Any], Any], shared: Any,
                 blocks: list[Any]) -> Iterator[Any]:
        pool, self.pool = self.pool, None
        if pool is not None and fn is self.warm:
            return pool.map(shared, blocks)
        if pool is not None:
            pool.close()
        return ray_map_blocks(fn, shared, blocks, self.cluster, self.what, self.modules)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def block_mapper(cluster: Cluster, what: str) -> BlockMapper:
    """:class:`BlockMapper` on ``cluster``, actors started on the first call."""
    return BlockMapper(cluster, what)
