"""Range search by tiles: every pair of rows with similarity >= a threshold, found block
pair by block pair, exactly, so that no process holds more than two blocks of rows.

What ``dedup --ray`` runs when its k-means partitions would not cut the work enough
(:meth:`pairkit.index.partitioned_range.Plan.worth_it`): the global search, without a
worker holding every row.

1. **Blocks**: the rows are cut into ``R`` consecutive blocks of at most
   :data:`TILE_BYTES` of float32 each (:func:`tile_spans`; fewer, bigger blocks for a
   small set: one block, one tile, when it fits and no parallelism is asked for).
2. **Tiles**: the upper triangle of block pairs ``(i, j)``, ``j >= i``, diagonal
   included. A task is one block row ``i`` and some of its ``j`` (:func:`tile_tasks`):
   it reads block ``i`` once, then each block ``j`` in turn (the diagonal reuses block
   ``i``), and searches block ``i``'s rows (the queries) against block ``j``'s with the
   same FAISS flat inner-product range search as the global search
   (:func:`pairkit.index.range_search.range_search_blocks`: float32 rows, the radius just
   below the float32 threshold, queries in batches of ``batch_size``). A pair of rows
   ``a < b`` comes out once, as ``(a, b, score)``: from the tile of their blocks, and
   on the diagonal only with ``a < b`` (no self pair). It is the pair the global search
   keeps (queries ``a``, base ``b``), scored the same way.

A task holds block ``i``, one block ``j`` (in FAISS's flat index, read into it
:data:`PIECE_ROWS` rows at a time: the block is not held twice) and its pairs.
``map_blocks`` runs the tasks (here: :func:`~pairkit.core.blocks_here.map_here`; on Ray,
the actors of ``dedup --ray``, each reading its blocks from the store:
:class:`pairkit.core.row_view.RowView`, memory-mapped locally, by byte ranges on object
storage).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairkit.core.blocks_here import MapBlocks, block_spans

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]

TILE_BYTES = 256 << 20  # float32 bytes of one block of rows, at most
PIECE_ROWS = 65_536  # a block j is read into its index this many rows at a time


def tile_spans(n: int, dim: int, *, tasks: int = 1, min_rows: int = 4096,
               tile_bytes: int = TILE_BYTES) -> list[tuple[int, int]]:
    """The blocks of ``n`` rows of width ``dim``: ``(start, end)`` spans of at most
    ``tile_bytes`` of float32 each, and enough of them for about ``tasks`` tiles (each
    block at least ``min_rows`` rows when the budget allows): ``R`` blocks give
    ``R (R + 1) / 2`` tiles."""
    if n <= 0:
        return []
    most = max(1, tile_bytes // (4 * max(1, dim)))  # rows a block may hold
    blocks = math.ceil(n / most)
    wanted = math.ceil((math.sqrt(8 * max(1, tasks) + 1) - 1) / 2)  # R (R+1)/2 >= tasks
    blocks = max(blocks, min(wanted, math.ceil(n / max(1, min_rows))))
    return block_spans(n, math.ceil(n / blocks))


def tile_tasks(blocks: int, tasks: int = 1) -> list[tuple[int, tuple[int, ...]]]:
    """The upper triangle of ``blocks`` x ``blocks`` tiles as tasks ``(i, (j, ...))``: one
    block row ``i`` and consecutive ``j >= i``, at most ``ceil(tiles / tasks)`` tiles a
    task; the biggest tasks first (the last task to start is a small one)."""
    tiles = blocks * (blocks + 1) // 2
    per_task = max(1, math.ceil(tiles / max(1, tasks)))
    out = [(i, tuple(range(j0, min(blocks, j0 + per_task))))
           for i in range(blocks) for j0 in range(i, blocks, per_task)]
    out.sort(key=lambda t: -len(t[1]))
    return out


@dataclass
class TileShared:
    """What the tile tasks share: the rows (an array, or a
    :class:`~pairkit.core.row_view.RowView` each worker reads from the store), the blocks,
    the threshold and the search's batch size."""

    rows: Any
    spans: list[tuple[int, int]]
    threshold: float
    batch_size: int


def read_block(rows: Any, span: tuple[int, int]) -> np.ndarray:
    """Rows ``span`` of ``rows`` as a C-contiguous float32 array (one read)."""
    return np.ascontiguousarray(rows[span[0]:span[1]], dtype=np.float32)


def tile_row(shared: TileShared, task: tuple[int, tuple[int, ...]]) -> Pairs:
    """The pairs of the tiles ``(i, j)`` of ``task = (i, (j, ...))`` (module docstring):
    global row ids ``a < b`` and their scores."""
    from pairkit.core.threads import import_faiss
    from pairkit.index.range_search import float32_radius, range_block

    faiss = import_faiss()

    i, js = task
    i0 = shared.spans[i][0]
    xi = read_block(shared.rows, shared.spans[i])
    radius = float32_radius(shared.threshold)
    out: list[Pairs] = []
    for j in js:
        index = faiss.IndexFlatIP(xi.shape[1])
        j0, j1 = shared.spans[j]
        if j == i:
            index.add(xi)
        else:  # read in pieces, each copied into the index: block j is held once
            for p0, p1 in block_spans(j1 - j0, PIECE_ROWS):
                index.add(read_block(shared.rows, (j0 + p0, j0 + p1)))
        for start in range(0, len(xi), shared.batch_size):
            a, b, scores = range_block(index, xi[start:start + shared.batch_size], radius)
            a += start
            if j == i:  # the diagonal: each pair once, no self pair
                keep = b > a
                a, b, scores = a[keep], b[keep], scores[keep]
            out.append((a + i0, b + j0, scores))
        del index
    if not out:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return tuple(np.concatenate(c) for c in zip(*out, strict=True))  # type: ignore[return-value]


def task_rows(spans: list[tuple[int, int]], work: list[tuple[int, tuple[int, ...]]]
              ) -> list[int]:
    """The rows each task of ``work`` (:func:`tile_tasks` over the blocks ``spans``)
    counts for in a progress count that adds up to the rows: block ``i``'s rows spread
    evenly over its tiles ``(i, j >= i)``, a task's share that of its tiles (integers, the
    shares of one block summing to its rows)."""
    out = []
    for i, js in work:
        rows, tiles = spans[i][1] - spans[i][0], len(spans) - i
        lo, hi = js[0] - i, js[-1] + 1 - i
        out.append(rows * hi // tiles - rows * lo // tiles)
    return out


def tiled_pairs(rows: Any, threshold: float, map_blocks: MapBlocks, *, tasks: int = 1,
                batch_size: int = 4096, min_rows: int = 4096,
                tile_bytes: int = TILE_BYTES,
                progress: Callable[[int], None] | None = None) -> Iterator[Pairs]:
    """Every pair of ``rows`` (an (n, d) array or row view) with inner product >=
    ``threshold``, once each as ``(low, high, score)``, task by task (about ``tasks``
    of them) as ``map_blocks`` runs them: the pairs of the global search
    (:func:`pairkit.index.range_search.range_search_blocks` of the rows against
    themselves, with ``low < high``). ``progress(m)`` after each task's pairs, adding up
    to the rows (:func:`task_rows`)."""
    spans = tile_spans(len(rows), rows.shape[1], tasks=tasks, min_rows=min_rows,
                       tile_bytes=tile_bytes)
    work = tile_tasks(len(spans), tasks)
    found = map_blocks(tile_row, TileShared(rows, spans, float(threshold), batch_size), work)
    for pairs, m in zip(found, task_rows(spans, work), strict=True):
        yield pairs
        if progress is not None:
            progress(m)
