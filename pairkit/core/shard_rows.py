"""A store's rows read in place from its shards: :class:`ShardRows`, an (N, d) array-like
over the memory-mapped shard files (float16 or float32, as stored) that answers
``rows[slice]`` and ``rows[ids]`` with a copy of just those rows, without ever holding a
copy of the whole store (``Store.vectors`` makes one, 4 bytes per value).

Pages of a file mapping that were read count in the process's resident set until the
kernel drops them (it does not while memory is free), so a pass over a 2 GB store would
add 2 GB of RSS: after each read the touched shards' pages are handed back
(``madvise(MADV_DONTNEED)``: the process's mapping only, the page cache keeps them, and the
next read of those rows maps them again from the cache). Shards held in memory (a store
read from object storage) are plain arrays and are read as they are.

Before a mapped shard's rows are read its file's size is checked again (one fstat,
:func:`pairkit.core.store_files.check_mapped`): a shard truncated after the store was
opened is a StoreError naming it, not a SIGBUS.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from pairkit.core.store_files import check_mapped


class ShardRows:
    """Rows ``0 .. N - 1`` of the shard ``arrays`` (each (n_i, d), in row order), read
    on demand in their stored dtype (``np.asarray(rows[ids], np.float32)`` gives the
    values ``Store.vectors(np.float32)[ids]`` holds: float16 to float32 is exact)."""

    ndim = 2

    def __init__(self, arrays: list[np.ndarray], dim: int, dtype: Any,
                 names: list[str] | None = None) -> None:
        """``names``: what each of ``arrays`` is, for a message (``store ROOT: shard
        FILE``; default ``shard I``)."""
        names = names if names is not None else [f"shard {i}" for i in range(len(arrays))]
        kept = [(a, n) for a, n in zip(arrays, names, strict=True) if len(a)]
        self.arrays = [a for a, _ in kept]
        self.names = [n for _, n in kept]
        self.starts = np.cumsum([0] + [len(a) for a in self.arrays]).astype(np.int64)
        self.shape = (int(self.starts[-1]), int(dim))
        self.dtype = np.dtype(dtype)
        self.maps = [_mapping(a) for a in self.arrays]

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        """Values in all (``N * d``), as an array's ``size``."""
        return self.shape[0] * self.shape[1]

    def __getitem__(self, key: Any) -> np.ndarray:
        """``key``: a slice (any step), an int, or an int array (1-d; negative ids count
        from the end, as numpy's). Returns a new (len, d) array (``(d,)`` for an int)."""
        if isinstance(key, (int, np.integer)):
            return self[np.array([key])][0]
        if isinstance(key, slice):
            return self.take(np.arange(*key.indices(len(self)), dtype=np.int64))
        return self.take(np.asarray(key))

    def take(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` (1-d ints) as a new C-contiguous (len(ids), d) array."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise IndexError("ShardRows takes a slice, an int or a 1-d array of ints")
        ids = ids.astype(np.int64, copy=False)
        n = len(self)
        if ids.size and (int(ids.min()) < -n or int(ids.max()) >= n):
            raise IndexError(f"row id out of range for {n} rows")
        ids = np.where(ids < 0, ids + n, ids)
        out = np.empty((len(ids), self.shape[1]), dtype=self.dtype)
        if not len(ids):
            return out
        shard = np.searchsorted(self.starts, ids, side="right") - 1
        lo, hi = int(shard.min()), int(shard.max())
        if lo == hi:  # one shard (a block of consecutive rows, mostly)
            check_mapped(self.arrays[lo], self.names[lo])
            out[:] = self.arrays[lo][ids - self.starts[lo]]
            self.release([lo])
            return out
        for s in np.unique(shard):
            sel = shard == s
            check_mapped(self.arrays[s], self.names[s])
            out[sel] = self.arrays[s][ids[sel] - self.starts[s]]
            # each shard handed back before the next is read: scattered rows fault in
            # their neighbours too (the kernel maps 64 kB around each), so a sample
            # across a 2 GB store would otherwise map most of it at once
            self.release([int(s)])
        return out

    def blocks(self, rows: int) -> Any:
        """``(start, block)`` of ``rows`` consecutive rows at a time, in order (the last
        shorter), each block a copy in the stored dtype."""
        for start in range(0, len(self), rows):
            yield start, self[start:start + rows]

    def release(self, shards: Any = None) -> None:
        """Hand back the pages of the shards ``shards`` (indices; None: all) read so far
        (module docstring); nothing for shards held in memory."""
        for s in range(len(self.maps)) if shards is None else shards:
            m = self.maps[s]
            if m is not None:
                try:
                    m.madvise(mmap.MADV_DONTNEED)
                except (OSError, ValueError):  # closed, or not supported here
                    self.maps[s] = None


def _mapping(array: np.ndarray) -> mmap.mmap | None:
    """The file mapping behind a memory-mapped shard, None for an array in memory."""
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is None or not hasattr(base, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    return base
