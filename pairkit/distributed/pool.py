"""Blocks of work on Ray actors: ``fn(shared, block)`` for every block, results in order.

``shared`` (the index, the vectors, the false-negative context: whatever every block
needs) goes into Ray's object store once; each actor deserialises it once (numpy arrays
zero-copy on the same node) and then runs the blocks this process hands it, one at a
time, to whichever actor is free. An actor whose process dies (killed, out of memory, its
node lost) is replaced by a new one, and its block handed to the next free actor (up to
:data:`~pairkit.distributed.RETRIES` times per block), so a killed worker or node costs
time, not results: results are kept only by this process, once per block.

A new actor gets blocks only once it answers (its process started and imported what
the blocks need): one that can't be placed (its node gone, no CPU left) never holds a
block hostage while the others are free.

The actors can be started before ``shared`` exists (:class:`BlockPool`): their processes
start and import what the blocks need while this process is still loading the store and
building the index.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from pairkit.distributed import (
    RETRIES,
    Cluster,
    crash_marker,
    maybe_crash,
    maybe_hold,
    require_ray,
    worker_error,
)


class BlockWorker:
    """One Ray actor: runs ``fn(shared, block)`` for blocks; ``shared`` is fetched from
    the object store on the first block and kept."""

    def __init__(self, fn: Callable[[Any, Any], Any], threads: int, crash: str | None,
                 modules: tuple[str, ...] = ()) -> None:
        from pairkit.core.threads import configure

        configure(threads)
        for name in modules:  # imported now, while the driver still prepares the blocks
            importlib.import_module(name)
        self.fn = fn
        self.crash = crash
        self.shared: Any = None
        self.loaded: Any = None  # the reference ``shared`` came from

    def ready(self) -> bool:
        """Answers once the actor is up (its constructor ran)."""
        return True

    def run(self, index: int, block: Any, box: list[Any],
            fn: Callable[[Any, Any], Any] | None = None) -> tuple[int, Any]:
        maybe_crash(self.crash)
        maybe_hold()
        if self.loaded != box[0]:  # the first block of a map: its shared, fetched once
            import ray

            self.shared = None  # the last map's, freed first
            self.shared, self.loaded = ray.get(box[0]), box[0]
        return index, (fn or self.fn)(self.shared, block)


# no worker placed this long (every CPU of the cluster held by other jobs, say): one line
# on stderr says why the run waits (Ray itself waits without a word)
WAIT_NOTE_S = 60.0


def waiting_note(threads: int, waited: float) -> str:
    """The line a run waiting for its first worker prints: what it asks for, what is
    free now."""
    import ray

    free = ray.available_resources().get("CPU", 0.0)
    total = ray.cluster_resources().get("CPU", 0.0)
    return (f"note: waiting for the Ray cluster: no worker has started in {waited:.0f} s; "
            f"each asks for {threads} CPUs, and {free:g} of {total:g} CPUs are free (other "
            "jobs may hold them); still waiting (Ctrl-C stops)")


class BlockPool:
    """``cluster.workers`` actors of ``cluster.threads`` CPUs for ``fn``, started now;
    :meth:`map` runs the blocks on them once and then stops them (so does :meth:`close`)."""

    def __init__(self, fn: Callable[[Any, Any], Any], cluster: Cluster, what: str,
                 modules: tuple[str, ...] = ()) -> None:
        ray = require_ray()
        self.what = what
        # no restart by Ray: a restarted actor keeps its block until it is placed again,
        # which may be never (its node is gone and the other actors hold the CPUs); this
        # pool replaces dead actors itself and hands their blocks to the living
        self.actor = ray.remote(BlockWorker).options(num_cpus=cluster.threads,
                                                     max_restarts=0, max_task_retries=0)
        self.args = (fn, cluster.threads, crash_marker(), modules)
        self.threads = cluster.threads
        self.placed = False  # some actor answered (a note on a busy cluster until then)
        self.noted = False
        self.workers = cluster.workers
        self.actors: list[Any] = []
        self.starting: dict[Any, Any] = {}  # ready() future -> actor
        self.idle: list[Any] = []  # ready, between two maps
        for _ in range(self.workers):
            self.start_actor()

    def start_actor(self) -> None:
        a = self.actor.remote(*self.args)
        self.actors.append(a)
        self.starting[a.ready.remote()] = a

    def drop_actor(self, a: Any) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.kill(a, no_restart=True)
        with contextlib.suppress(ValueError):
            self.actors.remove(a)

    def map(self, shared: Any, blocks: list[Any],
            fn: Callable[[Any, Any], Any] | None = None, last: bool = True) -> Iterator[Any]:
        """Yield ``fn(shared, block)`` (``fn``: the pool's own by default) for each of
        ``blocks``, in order. ``shared`` may be a reference into Ray's object store (made
        on a worker: this process never holds it). A worker's error is raised here as one
        PairkitError line; so is a block whose worker died more than RETRIES times. The
        actors stop at the end unless ``last`` is False (another map follows: then
        :meth:`close` them when done)."""
        import ray
        from ray.exceptions import RayActorError

        finished = False
        try:
            if not blocks:
                return
            # nested: Ray hands the reference over, the actor fetches
            box = [shared if isinstance(shared, ray.ObjectRef) else ray.put(shared)]
            todo = deque(range(len(blocks)))
            tries = [0] * len(blocks)
            idle, self.idle = self.idle, []  # the actors a previous map left free
            running: dict[Any, tuple[Any, int]] = {}  # run() future -> (actor, block)
            done: dict[int, Any] = {}
            deaths, turn = 0, 0
            while turn < len(blocks):
                while todo and idle:
                    a, i = idle.pop(), todo.popleft()
                    running[a.run.remote(i, blocks[i], box, fn)] = (a, i)
                if turn in done:
                    yield done.pop(turn)
                    turn += 1
                    continue
                if not running and not self.starting:
                    self.start_actor()  # every actor died: a new one, wherever it fits
                ref = self.wait_one([*running, *self.starting])
                a, i = running.pop(ref) if ref in running else (self.starting.pop(ref), -1)
                try:
                    value = ray.get(ref)
                except RayActorError as exc:
                    self.drop_actor(a)
                    deaths += 1
                    if i >= 0:
                        tries[i] += 1
                        if tries[i] > RETRIES:
                            raise worker_error(exc, self.what) from None
                        todo.appendleft(i)
                    elif deaths > RETRIES * max(self.workers, 1):
                        raise worker_error(exc, self.what) from None
                    self.start_actor()
                    continue
                except Exception as exc:
                    raise worker_error(exc, self.what) from None
                idle.append(a)
                self.placed = True
                if i >= 0:
                    index, result = value
                    done[index] = result
            finished = True
            self.idle = idle
        finally:
            if last or not finished:  # failed, stopped early, or the last map
                self.close()

    def wait_one(self, refs: list[Any]) -> Any:
        """The first of ``refs`` to finish; while no actor has been placed, a note after
        :data:`WAIT_NOTE_S` (once) says the run is waiting for the cluster's CPUs."""
        import ray

        while True:
            timeout = None if self.placed or self.noted else WAIT_NOTE_S
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
            if ready:
                return ready[0]
            if not self.placed and not self.noted:
                self.noted = True
                print(waiting_note(self.threads, WAIT_NOTE_S), file=sys.stderr, flush=True)

    def close(self) -> None:
        for a in list(self.actors):
            self.drop_actor(a)
        self.actors, self.starting, self.idle = [], {}, []


def ray_map_blocks(fn: Callable[[Any, Any], Any], shared: Any, blocks: list[Any],
                   cluster: Cluster, what: str = "a block",
                   modules: tuple[str, ...] = ()) -> Iterator[Any]:
    """Yield ``fn(shared, block)`` for each of ``blocks``, in order, computed by up to
    ``cluster.workers`` actors of ``cluster.threads`` CPUs (``what`` names the work in
    an error)."""
    if not blocks:
        return iter(())
    return BlockPool(fn, cluster, what, modules).map(shared, blocks)


MINE_MODULES = ("faiss", "pairkit.index.search", "pairkit.mine.blocks",
                "pairkit.mine.block_parts", "pairkit.mine.ivf_parts")


class BlockMapper:
    """``map_blocks(fn, shared, blocks)`` on a cluster (the hook of
    :func:`pairkit.mine.blocks.mine_block`). With ``warm`` (the ``fn`` the
    blocks will run), the actors start now and serve the first call; :meth:`close` stops
    them if no call came. Its workers read the store themselves
    (``workers_read_store``: :func:`pairkit.mine.command.workers_rows`)."""

    workers_read_store = True

    @property
    def workers(self) -> int:
        """The cluster's workers (actors at a time)."""
        return int(self.cluster.workers)

    def __init__(self, cluster: Cluster, what: str,
                 warm: Callable[[Any, Any], Any] | None = None,
                 modules: tuple[str, ...] = MINE_MODULES) -> None:
        self.cluster, self.what, self.warm, self.modules = cluster, what, warm, modules
        self.pool = BlockPool(warm, cluster, what, modules) if warm is not None else None

    def __call__(self, fn: Callable[[Any, Any], Any], shared: Any,
                 blocks: list[Any]) -> Iterator[Any]:
        pool, self.pool = self.pool, None
        if pool is not None:  # its actors run any function of the modules they imported
            return pool.map(shared, blocks, fn)
        return ray_map_blocks(fn, shared, blocks, self.cluster, self.what, self.modules)

    def remote_pair(self, fn: Callable[..., tuple[Any, Any]], *args: Any) -> tuple[Any, Any]:
        """``fn(*args)`` (a pair ``(big, small)``) run by a Ray task on the cluster:
        ``big`` stays in Ray's object store (its reference is returned: pass it as the
        ``shared`` of a call, this process never holds it), ``small`` comes back. The
        task reserves no CPU (the blocks' actors may hold them all) and is retried when
        its worker dies."""
        return remote_pair(self.cluster, self.what, fn, *args)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def pair_task(threads: int, fn: Callable[..., tuple[Any, Any]],
              args: tuple[Any, ...]) -> tuple[Any, Any]:
    """The body of :func:`remote_pair`'s task; an argument that is a reference into Ray's
    object store (another task's result, which the driver never held) is fetched here."""
    import ray

    from pairkit.core.threads import configure

    configure(threads)
    return fn(*(ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args))


def remote_pair(cluster: Cluster, what: str, fn: Callable[..., tuple[Any, Any]],
                *args: Any) -> tuple[Any, Any]:
    """See :meth:`BlockMapper.remote_pair`."""
    ray = require_ray()
    task = ray.remote(pair_task).options(num_returns=2, num_cpus=0, max_retries=RETRIES)
    big, small = task.remote(cluster.threads, fn, args)
    try:
        return big, ray.get(small)
    except Exception as exc:
        raise worker_error(exc, what) from None


def block_mapper(cluster: Cluster, what: str) -> BlockMapper:
    """:class:`BlockMapper` on ``cluster``, actors started on the first call."""
    return BlockMapper(cluster, what)
