"""Exact quantiles of float32 values that arrive block by block, without holding them.

``np.quantile(x.astype(np.float64), qs)`` (the summary's score quantiles) needs only the
count and the few order statistics next to each ``(n - 1) * q``. :class:`StreamQuantiles`
appends each block's values to a spill file and counts them by the top 16 bits of an
order-preserving 32-bit key; at the end one pass over the file counts, inside the
buckets that hold the wanted ranks, the low 16 bits: the exact float32 at each rank.
Memory: two 65,536-bin histograms per wanted bucket, and one chunk of the file at a time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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


class StreamQuantiles:
    """Values added with :meth:`add`; :meth:`quantiles` as ``np.quantile`` on all of them
    (as float64, method ``linear``). The spill file ``path`` is removed by :meth:`close`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.fh = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self.high = np.zeros(BINS, np.int64)
        self.count = 0
        self.nans = 0

    def add(self, values: np.ndarray) -> None:
        x = np.asarray(values, dtype=np.float32).ravel()
        nan = np.isnan(x)
        if nan.any():
            self.nans += int(nan.sum())
            x = x[~nan]
        if not len(x):
            return
        keys = sort_keys(x)
        self.high += np.bincount(keys >> 16, minlength=BINS)
        self.count += len(x)
        keys.tofile(self.fh)

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
        self.fh.flush()
        below = np.concatenate([[0], np.cumsum(self.high)])
        buckets = [int(np.searchsorted(below, r, side="right")) - 1 for r in ranks]
        wanted = sorted(set(buckets))
        low = {b: np.zeros(BINS, np.int64) for b in wanted}
        wanted_arr = np.array(wanted, dtype=np.uint32)
        with open(self.path, "rb") as fh:
            while True:
                keys = np.fromfile(fh, dtype=np.uint32, count=CHUNK)
                if not len(keys):
                    break
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
        """Close and remove the spill file."""
        self.fh.close()
        self.path.unlink(missing_ok=True)
