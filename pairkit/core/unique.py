"""Distinct values of a large integer array by a sort.

numpy 2.4's ``np.unique(x)`` (no ``return_*`` options) takes a hash-based path that is
~70x slower than a sort on millions of distinct int64 keys (2,000,000 random keys:
2.1 s against 0.03 s of CPU, one thread; docs/benchmarks.md "Downstream"). The pair keys of
``mine``'s mutual-neighbour lists are such arrays (N x m distinct keys).

``np.unique(rows, axis=0)`` is slower still on integer rows (it sorts a structured view);
:func:`unique_rows` gives its results from one int64 key per row (docs/benchmarks.md
"Train throughput").
"""

from __future__ import annotations

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` (flattened), ascending: ``np.unique(values)``."""
    flat = np.sort(np.asarray(values).ravel())
    if len(flat) == 0:
        return flat
    return flat[np.r_[True, flat[1:] != flat[:-1]]]


def unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of a 2-D integer array, lexicographically ascending, with the index
    of each one's first occurrence and each row's index into them: ``np.unique(rows,
    axis=0, return_index=True, return_inverse=True)``, bit for bit.

    numpy's ``axis=0`` sorts a structured view of the rows (2,000,000 (anchor, positive)
    id pairs: ~36 s of CPU, one thread); here each row becomes one int64 key, its columns'
    offsets from their minimum in mixed radix (an order-preserving map), sorted stably
    (~13x faster). When the key would not fit int64 the columns are lexsorted instead."""
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[1] == 0 or not np.issubdtype(rows.dtype, np.integer):
        uniq, index, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        return uniq, index, inverse.reshape(-1)
    n = len(rows)
    if n == 0:
        empty = np.zeros(0, np.intp)
        return rows.copy(), empty, empty.copy()
    key = _row_keys(rows)
    if key is not None:
        order = np.argsort(key, kind="stable")
        sk = key[order]
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(sk[1:], sk[:-1], out=new[1:])
    else:
        order = np.lexsort(rows.T[::-1])  # first column primary; stable
        sr = rows[order]
        new = np.empty(n, dtype=bool)
        new[0] = True
        new[1:] = (sr[1:] != sr[:-1]).any(axis=1)
    index = order[new]
    inverse = np.empty(n, dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    return rows[index], index, inverse


def _row_keys(rows: np.ndarray) -> np.ndarray | None:
    """One int64 per row ordered as the rows are lexicographically (column j's offset from
    its minimum, in mixed radix of the columns' spans), or None when the product of the
    spans exceeds int64."""
    if rows.dtype.kind == "u" and rows.dtype.itemsize >= 8:
        return None  # its values need not fit int64
    lo = [int(v) for v in rows.min(axis=0)]
    hi = [int(v) for v in rows.max(axis=0)]
    total = 1
    for a, b in zip(lo, hi, strict=True):
        total *= b - a + 1
    if total > np.iinfo(np.int64).max:
        return None
    key = np.zeros(len(rows), dtype=np.int64)
    for j, (a, b) in enumerate(zip(lo, hi, strict=True)):
        col = rows[:, j].astype(np.int64)
        col -= a
        key *= b - a + 1
        key += col
    return key
