"""``mine --ray``: the blocks of anchors mined by Ray tasks, the index and the
false-negative context built here once and shipped to them.

:class:`RayMine` is the ``executor`` of :func:`pairkit.mine.command.mine_to_files`
(chosen by the command line): it fits the index options to the workers (FAISS on their
CPUs) and runs ``run(map_blocks)`` with ``map_blocks`` mapping each block of anchors
(:func:`pairkit.mine.blocks.mine_block`) over the cluster, so the result is the local
run's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pairkit.errors import PairkitError
from pairkit.index.options import IndexOptions

Run = Callable[[Any], tuple[Any, dict[str, Any]]]


def cpu_search(index: IndexOptions, command: str) -> IndexOptions:
    """``--ray``: the search runs on the workers' CPUs with FAISS (an index built on a GPU
    here could not be shipped to them); an explicit GPU device or the torch engine is
    bad usage."""
    from pairkit.index.backend import ray_search

    where = ray_search(command, index.device, index.backend)
    return replace(index, device=where.device, backend=where.name)


class RayMine:
    """``mine --ray ADDRESS``: see the module docstring."""

    def __init__(self, address: str) -> None:
        self.address = address

    def search_options(self, index: IndexOptions) -> IndexOptions:
        """``index`` fitted to the workers (:func:`cpu_search`)."""
        return cpu_search(index, "mine")

    def __call__(self, run: Run) -> tuple[Any, dict[str, Any]]:
        return on_ray(self.address, run)


def on_ray(address: str, run: Run) -> tuple[Any, dict[str, Any]]:
    """``run(map_blocks)`` with the blocks of anchors mined on the Ray cluster at
    ``address``. With ``local``, ``run`` starts in a thread at once (store, index,
    false-negative context) while this thread starts Ray and the workers (whose processes
    start and import meanwhile); the blocks wait for them. A cluster to join is joined
    first (quick, and a wrong address fails before any work)."""
    import threading

    from pairkit.distributed import connect, require_ray
    from pairkit.distributed.pool import BlockMapper
    from pairkit.mine.blocks import mine_block

    require_ray()
    if address != "local":
        cluster = connect(address)
        mapper = BlockMapper(cluster, "mining a block of anchors", warm=mine_block)
        try:
            table, stats = run(mapper)
        finally:
            mapper.close()
        stats["ray"] = cluster.describe()
        return table, stats
    ready = threading.Event()
    box: dict[str, Any] = {}

    def map_blocks(fn: Any, shared: Any, blocks: list[Any]) -> Any:
        ready.wait()
        if "mapper" not in box:
            raise PairkitError("the Ray cluster did not start")
        return box["mapper"](fn, shared, blocks)

    def remote_pair(fn: Any, *args: Any) -> tuple[Any, Any]:
        ready.wait()
        if "mapper" not in box:
            raise PairkitError("the Ray cluster did not start")
        return box["mapper"].remote_pair(fn, *args)  # type: ignore[no-any-return]

    map_blocks.workers_read_store = True  # type: ignore[attr-defined]  # as BlockMapper's
    map_blocks.remote_pair = remote_pair  # type: ignore[attr-defined]

    def work() -> None:
        try:
            box["result"] = run(map_blocks)
        except BaseException as exc:  # raised again in the calling thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="pairkit-mine", daemon=True)
    thread.start()
    try:
        cluster = connect(address)
        box["mapper"] = BlockMapper(cluster, "mining a block of anchors", warm=mine_block)
    finally:
        ready.set()
        thread.join()  # also when Ray failed: the thread stops at its first block
        if "mapper" in box:
            box["mapper"].close()
    if "error" in box:
        raise box["error"]
    table, stats = box["result"]
    stats["ray"] = cluster.describe()
    return table, stats
