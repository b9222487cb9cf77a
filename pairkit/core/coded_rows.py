"""Rows that many rows share, stored once: :class:`CodedRows`, an (N, d) array-like whose
row ``i`` is ``table[codes[i]]``, and :class:`CodedRuns`, (G, N) labels whose column ``i``
is ``table[:, codes[i]]``.

What the cluster rule's diffusion coordinates are above the spectral sample
(:func:`pairkit.mine.spectral.all_coordinates`): a row outside the sample takes the
coordinates of its nearest cell of sampled rows, so 1,250 cells and 20,000 sampled rows
hold every row's values, and each row needs only its code (2 bytes, not 2 x dims: 64-128
bytes a row at 32-64 dims, 0.5-1 GB at 8M rows, kept for the run and shipped to a
cluster's block workers). The rule's k-means runs extend the same way (the majority
label of the nearest cell): their labels by the same codes (16 bytes a row for 8 runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def code_dtype(count: int) -> np.dtype:
    """The smallest integer type that numbers ``count`` table rows."""
    for dtype in (np.int16, np.int32):
        if count <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int64)


class Coded:
    """What :class:`CodedRows` and :class:`CodedRuns` share: ``codes`` (N,) integers into
    the entries of a 2-d ``table`` along ``axis`` (0: its rows, 1: its columns)."""

    ndim = 2
    axis = 0

    def __init__(self, codes: np.ndarray, table: np.ndarray) -> None:
        self.codes = np.asarray(codes)
        self.table = np.asarray(table)
        if self.codes.ndim != 1 or self.table.ndim != 2:
            raise ValueError(f"{type(self).__name__} needs (N,) codes and a 2-d table")
        check_codes(self.codes, self.table.shape[self.axis])
        width = int(self.table.shape[1 - self.axis])
        self.shape = ((len(self.codes), width) if self.axis == 0
                      else (width, len(self.codes)))
        self.dtype = self.table.dtype

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.table.nbytes)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.take(self.table, self.codes, axis=self.axis)
        return out if dtype is None else out.astype(dtype, copy=False)


class CodedRows(Coded):
    """Row ``i`` is ``table[codes[i]]``: ``codes`` (N,) integers, ``table`` (T, d).

    Indexing (an int, a slice, an int or bool array) returns what indexing the full
    (N, d) array would, as a new array in the table's dtype; ``np.asarray`` builds the
    full array (for callers that need one)."""

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple):
            raise IndexError("CodedRows takes rows only (an int, a slice or a 1-d array)")
        return np.asarray(self.table[self.codes[key]])


class CodedRuns(Coded):
    """A (G, N) array-like of G labels per row (the cluster rule's runs) whose column ``i``
    is ``table[:, codes[i]]``: ``codes`` (N,), ``table`` (G, T).

    ``runs[g]`` is run ``g`` (a :class:`CodedValues`), ``runs[g, rows]`` and
    ``runs[:, rows]`` what the full array gives; iterating yields the runs;
    ``np.asarray`` builds the full array."""

    axis = 1

    def __iter__(self) -> Iterator[CodedValues]:
        return (self[g] for g in range(len(self)))

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            if len(key) != 2:
                raise IndexError("CodedRuns takes [run], [run, rows] or [:, rows]")
            run, rows = key
            return np.asarray(self.table[run][..., self.codes[rows]])
        if isinstance(key, (int, np.integer)):
            return CodedValues(self.codes, self.table[key])
        raise IndexError("CodedRuns takes [run], [run, rows] or [:, rows]")

    def with_table(self, table: np.ndarray) -> CodedRuns:
        """The same codes over another table (the runs' labels in another dtype)."""
        return CodedRuns(self.codes, table)


class CodedValues:
    """One run of :class:`CodedRuns`: value ``i`` is ``values[codes[i]]``."""

    ndim = 1

    def __init__(self, codes: np.ndarray, values: np.ndarray) -> None:
        self.codes, self.values = codes, np.asarray(values)
        self.shape = (len(codes),)
        self.dtype = self.values.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        return self.values[self.codes[key]]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.values[self.codes]
        return out if dtype is None else out.astype(dtype, copy=False)


def check_codes(codes: np.ndarray, count: int) -> None:
    """ValueError unless ``codes`` are integers in ``[0, count)``."""
    if codes.dtype.kind not in "iu":
        raise ValueError(f"codes must be integers, got {codes.dtype}")
    if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= count):
        raise ValueError(f"codes must lie in [0, {count})")


def distinct_codes(codes: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, where)``: the distinct codes of rows ``rows`` and the place of each row's
    code among them (``values[where] == codes[rows]``)."""
    values, where = np.unique(codes[rows], return_inverse=True)
    return values, where.reshape(-1)


def table_products(x: CodedRows, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """(len(left), len(right)) float32: the inner products of ``x``'s table rows ``left``
    and ``right`` (codes)."""
    return (np.asarray(x.table[left], dtype=np.float32)
            @ np.asarray(x.table[right], dtype=np.float32).T)


def coded_products(x: CodedRows, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """(len(rows), len(cols)) float32: the inner products of rows ``rows`` and ``cols`` of
    ``x``, each distinct pair of codes multiplied once (the rows of one IVF cell or one
    neighbourhood share few codes) and looked up."""
    left, li = distinct_codes(x.codes, rows)
    right, ri = distinct_codes(x.codes, cols)
    return table_products(x, left, right)[np.ix_(li, ri)]


Coords = np.ndarray | CodedRows  # unit rows as an array or by code
