"""Item-table columns without a Python object per row: labels and sources as integer
codes (:class:`Coded`), paths and hashes read one by one (:class:`StringColumn`).

``eval --ray`` keeps the references in the store, read by the workers; what the driver
still needs of every reference is its label and its source, to vote and to leave out a
query's own source. As Python objects (the parsed item table, ``store.labels()``) that
costs ~0.3 kB a row and grows with the collection; as codes it is 8 bytes a row for each.
:class:`Coded` is such a column: int64 codes into the distinct values, which stay a
pyarrow array (compact strings, no object per value), numbered in order of first
appearance as :func:`pairkit.core.store.codes_of` numbers them. The item table's columns
are read from its parquet file (:func:`store_column`): labels dictionary-encoded by
pyarrow, sources (about one per item) by 64-bit hashes checked against each code's first
row (:func:`hashed_codes`). ``dedup --ray``'s driver (:func:`pairkit.mine.dedup.run_dedup`)
and the relation's plan of ``mine`` (:func:`pairkit.mine.parts_run.plan_items`) read the
item table the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Coded:
    """A column of labels or sources: ``codes`` (n,) int64, -1 where the value is
    missing, into ``values`` (U,), the distinct values (a pyarrow array). Two columns
    with the same ``values`` object share one code space."""

    codes: np.ndarray
    values: Any

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, rows: np.ndarray) -> Coded:
        """The column's ``rows`` (ids or a mask), in the same code space."""
        return Coded(self.codes[rows], self.values)

    def objects(self) -> np.ndarray:
        """The values of the rows as an object array (None where missing): for a small
        column (the queries), never the references."""
        values = np.asarray(self.values.to_pylist() + [None], dtype=object)
        return values[np.where(self.codes >= 0, self.codes, len(values) - 1)]

    def present(self) -> np.ndarray:
        """The codes used by at least one row, ascending."""
        used = self.codes[self.codes >= 0]
        return np.flatnonzero(np.bincount(used, minlength=len(self.values)))


def coded_array(array: Any) -> Coded:
    """:class:`Coded` of a pyarrow array (nulls missing), codes in order of first
    appearance (as :func:`pairkit.core.store.codes_of`)."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(array)
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return Coded(codes, encoded.dictionary)


def store_column(store: Any, name: str, distinct: str = "few") -> Coded:
    """:class:`Coded` of the item table's column ``name`` (``label``, ``source``), read
    without building the pandas table. ``distinct``: ``few`` (labels: pyarrow's
    dictionary encoding of the column, :meth:`pairkit.core.store.Store.item_columns`) or
    ``many`` (sources, about one per item or two: :func:`hashed_codes`, the column read
    batch by batch, ~40 bytes a row at the peak where the dictionary encoding's hash
    table of millions of strings takes ~130)."""
    if distinct == "many":
        return hashed_codes(lambda: store.item_batches(name), store.count)
    (array,) = store.item_columns(name)
    return coded_array(array)


SPLITMIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
HASH_BASE = 0x100000001B3  # odd: the polynomial's base, mod 2^64


def string_hashes(array: Any) -> np.ndarray:
    """(n,) uint64 hash of each string of a pyarrow (large_)string array without nulls: a
    polynomial of its UTF-8 bytes mod 2^64, with its length, through splitmix64's
    finaliser; computed on the array's buffers (no Python object per string)."""
    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    if str(array.type) not in ("string", "large_string"):  # a view or dictionary type
        import pyarrow as pa

        array = array.cast(pa.large_string())
    wide = str(array.type) == "large_string"
    _, off_buf, data_buf = array.buffers()
    off = np.frombuffer(off_buf, dtype=np.int64 if wide else np.int32)
    off = off[array.offset:array.offset + n + 1].astype(np.int64)
    lengths = np.diff(off)
    data = (np.frombuffer(data_buf, dtype=np.uint8)[off[0]:off[-1]] if data_buf is not None
            else np.zeros(0, dtype=np.uint8))
    sums = np.zeros(n, dtype=np.uint64)
    full = lengths > 0
    if full.any():
        longest = int(lengths.max())
        powers = np.ones(longest, dtype=np.uint64)
        for j in range(1, longest):  # HASH_BASE^j mod 2^64
            powers[j] = np.uint64((int(powers[j - 1]) * HASH_BASE) & 0xFFFFFFFFFFFFFFFF)
        starts = off[:-1] - off[0]
        pos = np.arange(len(data), dtype=np.int64) - np.repeat(starts, lengths)
        with np.errstate(over="ignore"):
            terms = (data.astype(np.uint64) + np.uint64(1)) * powers[pos]
            sums[full] = np.add.reduceat(terms, starts[full])
    with np.errstate(over="ignore"):
        z = sums ^ (lengths.astype(np.uint64) * np.uint64(SPLITMIX[0]))
        z = z + np.uint64(SPLITMIX[0])
        z = (z ^ (z >> np.uint64(30))) * np.uint64(SPLITMIX[1])
        z = (z ^ (z >> np.uint64(27))) * np.uint64(SPLITMIX[2])
    return z ^ (z >> np.uint64(31))


HASH_ROWS = 1 << 14  # strings hashed at a time


def first_of_groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, group)`` of equal ``keys`` (n,): each distinct key's first row,
    ascending by key, and each row's group (the index of its key in that order): what
    ``np.unique(keys, return_index=True, return_inverse=True)`` gives, with ~28 bytes a
    row of temporaries at the peak instead of ~46."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    perm = np.argsort(keys, kind="stable")
    ordered = keys[perm]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    del ordered
    first = perm[new]
    ids = np.cumsum(new, dtype=np.int64)
    ids -= 1
    del new
    group = np.empty(n, dtype=np.int64)
    group[perm] = ids
    return first, group


def hashed_codes(batches: Any, count: int | None = None) -> Coded:
    """:class:`Coded` of a column of strings with many distinct values, given as a
    function that yields its pyarrow arrays in order (read twice, three times without
    ``count``, the rows when known): codes in
    order of first appearance (as :func:`pairkit.core.store.codes_of`) from 64-bit hashes
    of the strings (:func:`string_hashes`), then every row checked against the first row
    of its code, so that two strings sharing a hash can't share a code: on such a
    collision the column is dictionary-encoded instead (:func:`coded_array`). Nulls get
    -1.
    Memory: the hashes, their sort and the codes, ~40 bytes a row, and the distinct
    strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = sum(len(b) for b in batches()) if count is None else count
    hashes = np.empty(n, dtype=np.uint64)
    ok = np.ones(n, dtype=bool)
    start = 0
    for b in batches():
        for s in range(0, len(b), HASH_ROWS):  # small temporaries (the bytes as uint64)
            part = b.slice(s, HASH_ROWS)
            hashes[start:start + len(part)] = string_hashes(part)
            if part.null_count:
                ok[start:start + len(part)] = part.is_valid().to_numpy(zero_copy_only=False)
            start += len(part)
    if start != n:
        raise ValueError(f"the column has {start} rows, expected {n}")
    from pairkit.core.heap import return_free_memory

    return_free_memory()  # the decoded batches' pages, kept by pyarrow's pool
    every = bool(ok.all())
    rows = None if every else np.flatnonzero(ok)
    first, group = first_of_groups(hashes if every else hashes[ok])
    del hashes
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[order] = np.arange(len(first))
    if every:
        codes = rank[group]
        first_rows = first[order]
    else:  # nulls: no code (-1)
        codes = np.full(len(ok), -1, dtype=np.int64)
        codes[rows] = rank[group]
        first_rows = rows[first[order]]
    del group, rank
    # one more pass: each batch adds the distinct values first seen in it, then its rows
    # are checked against their codes' first rows (always in this batch or an earlier one)
    taken: list[Any] = []
    start = 0
    for b in batches():
        lo, hi = np.searchsorted(first_rows, [start, start + len(b)])
        if hi > lo:
            taken.append(b.take(pa.array(first_rows[lo:hi] - start)))
        mine = codes[start:start + len(b)]
        if taken and len(b):
            seen = pa.chunked_array(taken)
            same = pc.equal(b, seen.take(pa.array(np.maximum(mine, 0))))  # nulls: skipped
            if not pc.all(same).as_py():  # two strings share a hash
                return coded_array(pa.concat_arrays(list(batches())))
        start += len(b)
    values = (pa.concat_arrays(taken) if taken else pa.array([], type=pa.string()))
    return Coded(codes, values)


def as_coded(values: Any) -> Coded:
    """``values`` as :class:`Coded`: itself, or an object array encoded
    (:func:`pairkit.core.store.codes_of`), its distinct values as strings (a store's
    labels and sources are strings)."""
    if isinstance(values, Coded):
        return values
    import pyarrow as pa

    from pairkit.core.store import codes_of

    codes, uniques = codes_of(values)
    return Coded(codes, pa.array([str(v) for v in uniques], type=pa.string()))


def joint_codes(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """Codes of two columns in one code space: ``(codes of a, codes of b, distinct
    values)``, numbered in order of first appearance over ``a`` then ``b`` (-1 missing):
    the codes :func:`pairkit.core.store.codes_of` gives the two concatenated, so that what
    depends on the numbering (the linear probe's split by source, its classes) is the
    same. ``b``'s values are looked up among ``a``'s (by pyarrow, no Python object per
    value) unless the two share them."""
    a, b = as_coded(a), as_coded(b)
    import pyarrow as pa

    if a.values is b.values:
        values, b_codes = a.values, b.codes
    else:
        import pyarrow.compute as pc

        va = a.values
        vb = b.values if b.values.type == va.type else b.values.cast(va.type)
        where = pc.index_in(vb, value_set=va).fill_null(-1).to_numpy(zero_copy_only=False)
        where = where.astype(np.int64)
        new = where < 0
        where[new] = len(va) + np.arange(int(new.sum()))
        values = pa.concat_arrays([va, vb.filter(pa.array(new))]) if new.any() else va
        b_codes = np.where(b.codes >= 0, where[np.maximum(b.codes, 0)], -1)
    a_codes, b_codes, old = renumbered(a.codes, b_codes, len(values))
    if len(old) == len(values) and not np.any(old != np.arange(len(old))):
        return a_codes, b_codes, values  # numbered so already
    return a_codes, b_codes, values.take(pa.array(old))


RENUMBER_ROWS = 1 << 20


def renumbered(a: np.ndarray, b: np.ndarray, n_values: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes ``a`` and ``b`` (into ``n_values`` values, -1 missing) renumbered in order of
    first appearance over ``a`` then ``b``: ``(a, b, old)``, ``old`` the old code of each
    new one (values used by neither side dropped). A first position per value, by blocks
    of rows (no sort of the rows); ``a`` and ``b`` themselves when they are numbered so
    already (no copy)."""
    none = np.iinfo(np.int64).max
    first = np.full(n_values, none, dtype=np.int64)
    for offset, codes in ((0, a), (len(a), b)):
        for s in range(0, len(codes), RENUMBER_ROWS):
            block = codes[s:s + RENUMBER_ROWS]
            ok = block >= 0
            np.minimum.at(first, block[ok], np.flatnonzero(ok) + (offset + s))
    used = np.flatnonzero(first < none)
    old = used[np.argsort(first[used], kind="stable")]
    if not np.any(old != np.arange(len(old))):  # numbered so already: no copy
        return a, b, old
    new_of_old = np.full(n_values + 1, -1, dtype=np.int64)  # [-1] -> -1
    new_of_old[old] = np.arange(len(old))
    return new_of_old[a], new_of_old[b], old


def value_at(values: Any, code: int) -> Any:
    """The distinct value of ``code`` (from a pyarrow array or an object array)."""
    value = values[int(code)]
    return value.as_py() if hasattr(value, "as_py") else value


class StringColumn:
    """A column of strings (paths, file hashes) kept as a pyarrow array and read where
    used: ``column[i]`` a str (None where null), ``column[ids]`` or ``column[a:b]`` an
    object array of those rows only, ``np.asarray(column)`` every row (what a caller that
    needs them all pays)."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            return self.array[int(key)].as_py()
        if isinstance(key, slice):
            return np.asarray(self.array[key].to_pylist(), dtype=object)
        rows = np.asarray(key)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        out = np.empty(len(rows), dtype=object)
        out[:] = self.array.take(rows.astype(np.int64)).to_pylist()
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.empty(len(self.array), dtype=object)
        out[:] = self.array.to_pylist()
        return out if dtype is None else out.astype(dtype)


def missing_as_null(array: Any) -> Any:
    """``array`` (strings) with empty strings as nulls (a file hash that is not one)."""
    import pyarrow.compute as pc

    return pc.if_else(pc.equal(array, ""), None, array)
