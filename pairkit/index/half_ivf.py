"""An IVF index whose lists hold the store's float16 rows: :class:`HalfIvf`, what
:func:`pairkit.index.faiss_build.build_index` builds for ``--index ivf`` from rows read in
place (:class:`pairkit.core.shard_rows.ShardRows`) of a float16 store, instead of a FAISS
``IndexIVFFlat`` that holds every row as float32 (4 bytes a value: 4 GB at 8M x 128).

Same index, half the memory: the cells are trained by the same call on the same seeded
sample (:func:`pairkit.index.faiss_build.trained_ivf`), each row goes to the cell the same
quantizer assigns (``quantizer.assign``, what ``IndexIVF.add`` does), rows are kept in id
order within a cell (as ``add`` appends them), and the search is the list-major one
(:func:`pairkit.index.search.list_major_search`) that mine uses over an ``IndexIVFFlat``
(:class:`pairkit.index.search.IvfListMajor`) with each cell converted to float32 when it
is scanned: float16 to float32 is exact, so the matrix products and the results are the
same (tests/index/test_half_ivf.py). A float32 store is kept as float32 (no loss).

Building takes two passes over the rows, one shard block at a time: the cell of every row
(4 bytes a row kept), then each row copied into its cell's place; memory is the lists
(2 bytes a value for float16) plus 8 bytes a row (4 of them only while building).

Rows that are computed when read and cheap to compute again (a
:class:`~pairkit.core.row_view.RowView` with ``recompute`` set: the rules' whitened rows,
:func:`pairkit.mine.whitening.whitened_rows`) are not copied at all: the lists keep only
the ids in cell order (:class:`CellRows`) and read each cell's rows through the view when
it is scanned, the same rows by the same call (0.5 GB less at 1M x 128 float32, for one
more pass of the mapping per search pass).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.core.float16 import LEAN_BYTES, avoid_torch, to_float32

ASSIGN_BLOCK_ROWS = 65_536  # rows read, converted and assigned at a time (a multiple of 4096)
PROBES_PER_SEARCH = 1 << 21  # query x cell pairs per list-major pass (~100 MB of bookkeeping)


class HalfIvf:
    """The cells' ``quantizer`` (a FAISS ``IndexFlatIP``), ``nprobe``, and the rows of every
    cell: ``codes`` (N, d) in the rows' stored dtype, cell by cell (or a :class:`CellRows`
    that reads them when sliced), ``ids`` (N,) their row ids
    (int32 below 2^31 rows), ``offsets`` (nlist + 1,) where each cell starts. ``ntotal`` and
    ``search(x, k)`` as a FAISS index (:func:`pairkit.index.search.knn_search` takes it)."""

    def __init__(self, quantizer: Any, nprobe: int, codes: np.ndarray, ids: np.ndarray,
                 offsets: np.ndarray) -> None:
        self.quantizer = quantizer
        self.nprobe = int(nprobe)
        self.codes, self.ids, self.offsets = codes, ids, offsets
        self.ntotal = int(len(ids))
        self.nlist = int(len(offsets) - 1)
        self.d = int(codes.shape[1])

    @property
    def query_batch(self) -> int:
        """Queries :func:`pairkit.index.search.knn_search` hands :meth:`search` at a time.
        Each pass converts every cell it scans to float32 once, for all of its queries, so
        the more queries a pass has the less that conversion costs per query (with 8,192 a
        pass at 2M rows it took longer than the matrix products: 41% of a streamed mine);
        the pass's bookkeeping (cells, query ids and their order: ~48 bytes per query and
        cell probed) bounds it."""
        return queries_per_pass(self.nprobe)

    def inverted_list(self, cell: int) -> tuple[np.ndarray, np.ndarray]:
        """Cell ``cell``'s rows as float32 (a new C-contiguous array) and their ids."""
        lo, hi = int(self.offsets[cell]), int(self.offsets[cell + 1])
        return to_float32(np.asarray(self.codes[lo:hi])), self.ids[lo:hi].astype(np.int64)

    def cell_ids(self, cell: int) -> np.ndarray:
        """Cell ``cell``'s row ids (int64), without reading its rows."""
        return self.ids[int(self.offsets[cell]) : int(self.offsets[cell + 1])].astype(np.int64)

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(D, I)`` (nq, k): best first, -1/-inf padded (as ``IndexIVFFlat`` searched
        list-major with the same ``nprobe``)."""
        from pairkit.index.search import list_major_search

        return list_major_search(self.quantizer, self.nprobe, self.inverted_list, x, k)


def queries_per_pass(nprobe: int) -> int:
    """:attr:`HalfIvf.query_batch` of an index probing ``nprobe`` cells per query."""
    return max(8192, PROBES_PER_SEARCH // max(1, int(nprobe)))


class CellRows:
    """Rows ``ids`` of ``view`` (a :class:`~pairkit.core.row_view.RowView`) in that order,
    read through the view when sliced (the lists of a :class:`HalfIvf` of rows computed
    when read: only the ids are held)."""

    dtype = np.dtype(np.float32)

    def __init__(self, view: Any, ids: np.ndarray) -> None:
        self.view, self.ids = view, ids
        self.shape = (len(ids), int(view.shape[1]))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        return self.view.take(self.ids[key].astype(np.int64))


def build_half_ivf(rows: Any, quantizer: Any, nprobe: int) -> HalfIvf:
    """A :class:`HalfIvf` of ``rows`` (N, d), read ``ASSIGN_BLOCK_ROWS`` at a time, over
    the cells of a trained ``quantizer``; rows computed when read with ``recompute`` set
    are read again when scanned (:class:`CellRows`) instead of copied."""
    n, d = rows.shape
    nlist = int(quantizer.ntotal)
    recompute = getattr(rows, "recompute", False)
    if not recompute and n * d * np.dtype(rows.dtype).itemsize >= LEAN_BYTES:
        avoid_torch()  # this process's memory is these lists: no torch beside them
    cells = assign_cells(rows, quantizer)
    offsets = cell_offsets(cells, nlist)
    if recompute:
        order = np.argsort(cells, kind="stable")  # by cell, ids ascending within each
        ids = order.astype(np.int32 if n < 2**31 else np.int64)
        return HalfIvf(quantizer, nprobe, CellRows(rows, ids), ids, offsets)
    codes = np.empty((n, d), dtype=rows.dtype)
    ids = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
    cursor = offsets[:-1].copy()
    for start, block in rows.blocks(ASSIGN_BLOCK_ROWS):
        c = cells[start:start + len(block)].astype(np.int64)
        order = np.argsort(c, kind="stable")  # by cell, ids ascending within each
        c_sorted = c[order]
        first = np.searchsorted(c_sorted, c_sorted, side="left")  # first of its cell here
        place = cursor[c_sorted] + (np.arange(len(c_sorted)) - first)
        codes[place] = block[order]
        ids[place] = start + order
        cursor += np.bincount(c, minlength=nlist)
    return HalfIvf(quantizer, nprobe, codes, ids, offsets)


def assign_cells(rows: Any, quantizer: Any) -> np.ndarray:
    """The cell of every row of ``rows`` (N, d): ``quantizer.assign`` of
    ``ASSIGN_BLOCK_ROWS`` rows at a time, as float32 (int32, (N,)); what
    :func:`build_half_ivf` and the lists of ``mine --ray``
    (:mod:`pairkit.mine.ivf_parts`) assign, block for block."""
    cells = np.empty(len(rows), dtype=np.int32)
    for start, block in rows.blocks(ASSIGN_BLOCK_ROWS):
        assigned = quantizer.assign(np.ascontiguousarray(block, dtype=np.float32), 1)
        cells[start:start + len(block)] = assigned.ravel()
    return cells


def cell_offsets(cells: np.ndarray, nlist: int) -> np.ndarray:
    """Where each of ``nlist`` cells starts when the rows are laid out cell by cell:
    (nlist + 1,) int64, the last the row count."""
    offsets = np.zeros(nlist + 1, dtype=np.int64)
    np.cumsum(np.bincount(cells, minlength=nlist), out=offsets[1:])
    return offsets
