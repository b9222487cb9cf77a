"""Work cut into blocks, and the executor that runs them in this process.

A ``map_blocks`` function takes ``(fn, shared, blocks)`` and yields ``fn(shared, block)``
for each block, in order: :func:`map_here` here, or the Ray layer's
(:func:`pairkit.distributed.pool.ray_map_blocks`, :class:`~pairkit.distributed.pool.
BlockPool`), chosen at the command line. ``mine`` (:mod:`pairkit.mine.blocks`) and the
partitioned range search (:mod:`pairkit.index.partitioned_range`) both run on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

MapBlocks = Callable[[Callable[[Any, Any], Any], Any, list[Any]], Iterator[Any]]


def map_here(fn: Callable[[Any, Any], Any], shared: Any, blocks: list[Any]) -> Iterator[Any]:
    """``fn(shared, block)`` for each block, in this process, in order."""
    return (fn(shared, block) for block in blocks)


def block_spans(n: int, step: int) -> list[tuple[int, int]]:
    """``n`` rows in blocks of ``step``: ``(start, end)`` spans, in order."""
    return [(s, min(n, s + step)) for s in range(0, n, step)]
