"""Exact quantiles of float32 values that arrive block by block, without holding them.

``np.quantile(x.astype(np.float64), qs)`` (the summary's score quantiles) needs only the
count and the few order statistics next to each ``(n - 1) * q``. Each block's values are
written to a file as order-preserving 32-bit keys (:func:`write_keys`, where the block
ran) and counted by their top 16 bits; :class:`StreamQuantiles` adds the counts up and at
the end reads the files once, counting, inside the buckets that hold the wanted ranks,
the low 16 bits: the exact float32 at each rank. Memory: a 65,536-bin histogram per
wanted bucket, and one chunk of one file at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

BINS = 1 << 16
CHUNK = 1 << 22  # values read from the spill file at a time (16 MB)


def sort_keys(x: np.ndarray) -> np.ndarray:
    """uint32 keys whose order is the float32 order of ``x`` (NaN excluded by the caller)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return np.where(u >> 31 == 1, ~u, u | np.uint32(0x80000000)).astype(np.uint32)


def from_keys(keys: np.ndarray) -> np.ndarray:
    """The float32 values of :func:`sort_keys`'s ``keys``."""
    k = np.asarray(keys, dtype=np.uint32)
    u = np.where(k >> 31 == 1, k & np.uint32(0x7FFFFFFF), ~k).astype(np.uint32)
    return u.view(np.float32)


def keys_path(folder: str | os.PathLike[str], name: str, number: int, token: str = ""
              ) -> Path | str:
    """The keys file of block ``number`` of the values ``name`` in ``folder`` (a URL:
    the object's URL, its name with the writer's ``token``)."""
    from pairkit.core.side_files import side_path

    return side_path(folder, f"{name}-{number:06d}", ".keys", token)


def read_key_chunks(path: str | os.PathLike[str]) -> Iterator[np.ndarray]:
    """The keys of a file written by :func:`write_keys` (a URL: one object, read whole),
    :data:`CHUNK` at a time."""
    from pairkit.core.remote import is_url, read_bytes

    if is_url(path):
        yield np.frombuffer(read_bytes(str(path)), dtype=np.uint32)
        return
    with open(path, "rb") as fh:
        while True:
            keys = np.fromfile(fh, dtype=np.uint32, count=CHUNK)
            if not len(keys):
                return
            yield keys


def write_keys(values: np.ndarray, path: str | os.PathLike[str]) -> tuple[np.ndarray, int]:
    """Write the :func:`sort_keys` of ``values`` (NaN left out) to ``path`` (raw uint32)
    and return ``(counts by top 16 bits as pairs (bucket, count) (m, 2) int64, NaNs)``: a
    block's share of a :class:`StreamQuantiles`, made where the block ran."""
    x = np.asarray(values, dtype=np.float32).ravel()
    nan = np.isnan(x)
    keys = sort_keys(x[~nan])
    from pairkit.core.remote import write_whole

    write_whole(path, memoryview(keys).cast("B"))
    buckets, counts = np.unique(keys >> 16, return_counts=True)
    return np.stack([buckets.astype(np.int64), counts.astype(np.int64)], axis=1), int(nan.sum())


class StreamQuantiles:
    """Values added block by block, each block's keys in a file (:meth:`add`: written
    here into ``folder``; :meth:`add_file`: written where the block ran, by
    :func:`write_keys`); :meth:`quantiles` as ``np.quantile`` on all of them (as float64,
    method ``linear``), reading the files once. :meth:`close` removes the files."""

    def __init__(self, folder: str | os.PathLike[str], name: str = "values") -> None:
        self.folder, self.name = folder, name  # a folder, or a URL prefix
        self.files: list[str | Path] = []
        self.high = np.zeros(BINS, np.int64)
        self.count = 0
        self.nans = 0

    def add(self, values: np.ndarray) -> None:
        """Add ``values`` (their keys written to a file in the folder)."""
        path = keys_path(self.folder, self.name, len(self.files))
        self.add_file(path, *write_keys(values, path))

    def add_file(self, path: str | os.PathLike[str], buckets: np.ndarray, nans: int) -> None:
        """Add a block's values: their keys in ``path``, ``buckets`` and ``nans`` as
        :func:`write_keys` returned them."""
        from pairkit.core.remote import is_url

        self.files.append(str(path) if is_url(path) else Path(path))
        b = np.asarray(buckets, dtype=np.int64).reshape(-1, 2)
        np.add.at(self.high, b[:, 0], b[:, 1])
        self.count += int(b[:, 1].sum())
        self.nans += nans

    def quantiles(self, qs: Sequence[float]) -> list[float] | None:
        """``np.quantile(all values as float64, qs)`` as floats; None when none were added
        (a NaN among them makes every quantile NaN, as numpy's)."""
        n = self.count + self.nans
        if n == 0:
            return None
        if self.nans:
            return [float("nan")] * len(qs)
        q = np.asarray(qs, dtype=np.float64)
        virtual = (n - 1) * q  # numpy's "linear" method, step by step
        prev = np.floor(virtual)
        nxt = prev + 1
        above = virtual >= n - 1
        prev[above] = -1
        nxt[above] = -1
        prev_i, next_i = prev.astype(np.intp), nxt.astype(np.intp)
        ranks = sorted({int(r) % n for r in np.concatenate([prev_i, next_i])})
        value = dict(zip(ranks, self.order_statistics(ranks), strict=True))
        a = np.array([value[int(r) % n] for r in prev_i], dtype=np.float64)
        b = np.array([value[int(r) % n] for r in next_i], dtype=np.float64)
        gamma = np.asanyarray(virtual - prev_i)
        diff = b - a
        out = np.add(a, diff * gamma)
        np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
        return [float(v) for v in out]

    def order_statistics(self, ranks: list[int]) -> list[float]:
        """The float32 value at each 0-based rank of the sorted values."""
        below = np.concatenate([[0], np.cumsum(self.high)])
        buckets = [int(np.searchsorted(below, r, side="right")) - 1 for r in ranks]
        wanted = sorted(set(buckets))
        low = {b: np.zeros(BINS, np.int64) for b in wanted}
        wanted_arr = np.array(wanted, dtype=np.uint32)
        for path in self.files:
            for keys in read_key_chunks(path):
                hi = keys >> 16
                hit = np.isin(hi, wanted_arr)
                if not hit.any():
                    continue
                k, h = keys[hit], hi[hit]
                for b in wanted:
                    low[b] += np.bincount(k[h == b] & 0xFFFF, minlength=BINS)
        out = []
        for r, b in zip(ranks, buckets, strict=True):
            inside = np.cumsum(low[b])
            j = int(np.searchsorted(inside, r - below[b], side="right"))
            out.append(float(from_keys(np.array([(b << 16) | j], np.uint32))[0]))
        return out

    def close(self) -> None:
        """Remove the files (objects, for a URL)."""
        import contextlib

        from pairkit.core.remote import remove
        from pairkit.errors import PairkitError

        for path in self.files:
            if isinstance(path, Path):
                path.unlink(missing_ok=True)
            else:
                with contextlib.suppress(PairkitError):
                    remove(path)
        self.files = []
