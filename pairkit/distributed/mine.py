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
    ``address`` (``local``: started here), joined or started first. Not meanwhile in
    another thread: ``ray.init`` forks the processes of a local cluster, and a fork while
    another thread is in a BLAS call hung the driver in OpenBLAS's fork handler (the
    false-negative context being built; tests/distributed/test_ray.py). The blocks'
    actors start at once and import while ``run`` loads the store and plans."""
    from pairkit.distributed import connect, require_ray
    from pairkit.distributed.pool import BlockMapper
    from pairkit.mine.blocks import mine_block

    require_ray()
    cluster = connect(address)
    mapper = BlockMapper(cluster, "mining a block of anchors", warm=mine_block)
    try:
        table, stats = run(mapper)
    finally:
        mapper.close()
    stats["ray"] = cluster.describe()
    return table, stats
