"""Rows read where they lie: :class:`RowView`, an (n, d) float32 array-like over chosen
rows of a store (or of an array), optionally passed through a function (a trained head)
as they are read, and :class:`GatheredRows`, the few rows a step needs, read in one pass.

What a command's driver uses so that it never holds a copy of a collection's vectors
(``dedup --ray``, ``eval --ray``): the search runs on the workers, which read the rows
themselves (a :class:`RowView` pickles as the :class:`~pairkit.core.store_rows.StoreRows` it
reads from, its ids and its function, never as rows), and the driver reads only the rows
a step needs, in as few passes over the shards as it can: each read of ``ids`` visits
each shard once (on object storage, the blocks that hold the rows, fetched by byte
ranges: :mod:`pairkit.core.ranged_shard`), so many small reads of scattered rows cost a
pass each; gather them first (:meth:`RowView.gather`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pairkit.core.float16 import to_float32

Map = Callable[[np.ndarray], np.ndarray]


class RowView:
    """Rows ``ids`` (None: all) of ``source`` as float32, through ``fn`` when given (then
    ``dim`` is its output width). ``source``: an (N, d) array, or a
    :class:`~pairkit.core.store_rows.StoreRows` (its rows read in place with
    ``load()``; ``rows``: the ones already opened here, used instead and not pickled).
    Indexing (an int, a slice, an int or bool array) returns a new array, as numpy's
    does; :meth:`subset` and :meth:`mapped` return new views, reading nothing."""

    ndim = 2
    dtype = np.dtype(np.float32)
    # cheap to compute again (set by the view's maker): an index of these rows may keep
    # their ids and read them again when it scans them (pairkit.index.half_ivf.CellRows)
    recompute = False

    def __init__(self, source: Any, ids: np.ndarray | None = None, fn: Map | None = None,
                 dim: int | None = None, rows: Any = None) -> None:
        self.source, self.fn, self.rows = source, fn, rows
        self.ids = None if ids is None else np.asarray(ids, dtype=np.int64)
        n_source, d_source = self.base().shape if rows is not None or isinstance(
            source, np.ndarray) else (None, None)
        if self.ids is None and n_source is None:
            raise ValueError("RowView over a StoreRows needs its ids or its opened rows")
        n = len(self.ids) if self.ids is not None else int(n_source)  # type: ignore[arg-type]
        width = dim if dim is not None else d_source
        if width is None:
            raise ValueError("RowView needs the width of its rows (dim)")
        self.shape = (n, int(width))

    def __getstate__(self) -> dict[str, Any]:
        if isinstance(self.source, np.ndarray) or self.rows is None:
            return {**self.__dict__}
        return {**self.__dict__, "rows": None}  # the worker reads the store itself

    def base(self) -> Any:
        """The source's rows: the array, the opened rows, or the store's (read here)."""
        if self.rows is not None:
            return self.rows
        if isinstance(self.source, np.ndarray):
            return self.source
        self.rows = self.source.load()
        return self.rows

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def positions(self, key: Any) -> np.ndarray:
        """``key`` (int array, bool mask or slice) as positions 0 .. n - 1 (int64)."""
        if isinstance(key, slice):
            return np.arange(*key.indices(len(self)), dtype=np.int64)
        key = np.asarray(key)
        if key.dtype == bool:
            if key.shape != (len(self),):
                raise IndexError(f"a mask of {key.shape} for {len(self)} rows")
            return np.flatnonzero(key)
        if key.ndim != 1 or (key.size and key.dtype.kind not in "iu"):
            raise IndexError("RowView takes an int, a slice, or a 1-d int or bool array")
        key = key.astype(np.int64, copy=False)
        n = len(self)
        if key.size and (int(key.min()) < -n or int(key.max()) >= n):
            raise IndexError(f"row {int(key.max())} out of range for {n} rows")
        return np.where(key < 0, key + n, key)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, (int, np.integer)):
            return self.take(np.array([key]))[0]
        return self.take(self.positions(key))

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Rows at ``positions`` (0 .. n - 1) as a new C-contiguous float32 array, in
        one read of the source."""
        positions = np.asarray(positions, dtype=np.int64)
        rows = positions if self.ids is None else self.ids[positions]
        got = to_float32(np.asarray(self.base()[rows]))
        return got if self.fn is None else np.ascontiguousarray(self.fn(got), np.float32)

    def subset(self, key: Any) -> RowView:
        """The rows ``key`` selects (as :meth:`positions`), as a view."""
        pos = self.positions(key)
        ids = pos if self.ids is None else self.ids[pos]
        return RowView(self.source, ids, self.fn, self.shape[1], self.rows)

    def mapped(self, fn: Map, dim: int) -> RowView:
        """These rows through ``fn`` ((m, d) -> (m, dim) float32), as a view."""
        inner = self.fn
        out = fn if inner is None else (lambda x: fn(inner(x)))
        return RowView(self.source, self.ids, out, dim, self.rows)

    def store_ids(self) -> np.ndarray:
        """The source rows of this view's rows (all of them when no ids were given)."""
        return self.ids if self.ids is not None else np.arange(len(self), dtype=np.int64)

    def blocks(self, rows: int = 65536) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, rows)`` of ``rows`` consecutive rows at a time, in order."""
        for start in range(0, len(self), rows):
            yield start, self.take(np.arange(start, min(len(self), start + rows)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """All rows (the copy a view exists to avoid: for callers that need an array)."""
        out = np.empty(self.shape, np.float32)
        for start, block in self.blocks():
            out[start:start + len(block)] = block
        return out if dtype is None else out.astype(dtype, copy=False)

    def gather(self, positions: np.ndarray) -> GatheredRows:
        """The rows at ``positions``, read now in one pass, for a step that reads them
        (and only them) many times."""
        keys = np.unique(np.asarray(positions, dtype=np.int64))
        return GatheredRows(keys, self.take(keys), len(self))


class GatheredRows:
    """Rows ``keys`` (sorted, unique) of an (n, d) row set, held: indexing by ints among
    ``keys`` (an int, an int array, a slice) returns them as an array would; another row
    is an IndexError (a step reading rows it did not gather)."""

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, keys: np.ndarray, values: np.ndarray, n: int) -> None:
        self.keys, self.values = keys, values
        self.shape = (int(n), int(values.shape[1]))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, (int, np.integer)):
            return self.values[self.where(np.array([key]))[0]]
        if isinstance(key, slice):
            key = np.arange(*key.indices(self.shape[0]))
        return self.values[self.where(np.asarray(key))]

    def where(self, ids: np.ndarray) -> np.ndarray:
        """Positions in ``values`` of the rows ``ids``; IndexError for one not gathered."""
        ids = ids.astype(np.int64, copy=False)
        pos = np.searchsorted(self.keys, ids)
        if not len(ids):
            return pos
        if not len(self.keys) or (self.keys[np.minimum(pos, len(self.keys) - 1)] != ids).any():
            raise IndexError("row not gathered: gather every row a step reads first")
        return pos


def is_view(x: Any) -> bool:
    """True for rows read on demand (a :class:`RowView`), False for an array."""
    return isinstance(x, RowView)


class Reindexed:
    """``rows[ids[key]]`` for every ``key``: rows (an array, :class:`GatheredRows`) seen
    through a map of positions (the units of ``dedup`` to their rows)."""

    def __init__(self, rows: Any, ids: np.ndarray) -> None:
        self.rows, self.ids = rows, ids
        self.shape = (len(ids), rows.shape[1])

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        return self.rows[self.ids[key]]


def store_view(store: Any) -> RowView:
    """Every row of the opened ``store`` (a :class:`~pairkit.core.store.Store`) as a
    :class:`RowView`: read here in place from its shards, and on a worker from the store
    itself (a lazily opened :class:`~pairkit.core.store_rows.StoreRows`)."""
    from pairkit.core.store_rows import StoreRows

    return RowView(StoreRows.of(store, streamed=True, lazy=True), rows=store.rows(),
                   dim=store.dim)
