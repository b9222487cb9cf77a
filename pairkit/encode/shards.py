"""The shard buffer: encoded rows wait here until they make a shard of the store.

One buffer serves the local loop (:func:`pairkit.encode.embedder.embed_folder`: shards that
end at multiples of ``--shard-rows`` rounded down to whole images (:func:`shard_unit`), so
a resumed run cuts where a clean run does, or whatever is held after ``--shard-seconds``)
and the Ray partition workers
(:func:`pairkit.encode.embedder.embed_partition`: one shard per partition). Vectors stay
where the encoder left them (on the GPU) until :meth:`ShardBuffer.take`, which copies a
shard to the host in one transfer instead of one synchronising copy per batch.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pairkit.encode.batches import EncodedBatch
from pairkit.errors import PairkitError


class ShardBuffer:
    """Rows of encoded batches in arrival order: ``rows`` (views), ``images``, ``on_device``
    (images decoded on the device) and ``errors`` ({path, reason}) since the start."""

    def __init__(self) -> None:
        self._vectors: list[Any] = []
        self._items: list[dict[str, Any]] = []
        self.rows = 0
        self.images = 0
        self.on_device = 0
        self.errors: list[dict[str, str]] = []
        self.since = time.perf_counter()

    def add(self, batch: EncodedBatch) -> None:
        """Keep ``batch``'s rows (its vectors untouched: a device tensor or an array)."""
        self.errors += batch.errors
        if batch.vectors is None:
            return
        self._vectors.append(batch.vectors)
        self._items += batch.items
        self.rows += len(batch.items)
        self.images += batch.images
        self.on_device += batch.on_device

    def pending(self) -> int:
        """Rows held since the last :meth:`take`."""
        return len(self._items)

    def seconds(self) -> float:
        """Seconds since the last :meth:`take` or :meth:`take_shards` (or the start)."""
        return time.perf_counter() - self.since

    def take(self) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """The rows held, as (float32 (n, dim) array, one item dict per row), and forget
        them. (0, 0) and [] when none."""
        vectors, items = self._host(), self._items
        self._vectors, self._items = [], []
        self.since = time.perf_counter()
        return vectors, items

    def take_shards(self, count: int, shard_rows: int, whole: bool = True
                    ) -> list[tuple[np.ndarray, list[dict[str, Any]]]]:
        """The rows held cut into shards that end at multiples of ``shard_rows`` for a store
        of ``count`` rows (the first fills up the store's last shard): all of them
        (``whole``), or only full shards, the rest kept for later."""
        n = self.pending()
        cut = n if whole else aligned_cut(count, n, shard_rows)
        self.since = time.perf_counter()
        if not cut:
            return []
        vectors, items = self._host(), self._items
        out = []
        start = 0
        while start < cut:
            stop = min(cut, start + aligned_cut(count + start, cut - start, shard_rows,
                                                one=True))
            out.append((vectors[start:stop], items[start:stop]))
            start = stop
        self._vectors = [vectors[cut:]] if cut < n else []
        self._items = items[cut:]
        return out

    def _host(self) -> np.ndarray:
        """The vectors held as one float32 host array: the device tensors of a run of
        batches copied in one transfer (rows kept back by :meth:`take_shards` are already
        on the host)."""
        if not self._vectors:
            return np.zeros((0, 0), dtype=np.float32)
        out: list[np.ndarray] = []
        run: list[Any] = []
        for v in [*self._vectors, None]:
            if run and not (v is not None and not isinstance(v, np.ndarray)):
                import torch

                out.append(torch.cat(run).float().cpu().numpy())
                run = []
            if isinstance(v, np.ndarray):
                out.append(v)
            elif v is not None:
                run.append(v)
        vectors = np.concatenate(out).astype(np.float32, copy=False)
        check_finite(vectors, self._items)
        return vectors


def check_finite(vectors: np.ndarray, items: list[dict[str, Any]]) -> None:
    """Refuse rows that are not finite (NaN or inf: an encoder whose weights or
    ``--precision`` overflow), before any of ``items`` (one per row) reaches a shard; the
    shards committed before stay as they are."""
    bad = ~np.isfinite(vectors).all(axis=1)
    if not bad.any():
        return
    images = {str(item["source"]) for item in items}
    sick = list(dict.fromkeys(str(items[i]["source"]) for i in np.flatnonzero(bad)))
    raise PairkitError(f"the encoder gave non-finite embeddings for {len(sick)} of "
                       f"{len(images)} images (e.g. {sick[0]}): its weights or --precision "
                       "overflow; nothing was written for them")


def shard_unit(shard_rows: int, views: int) -> int:
    """The rows of a full shard of the local loop: ``--shard-rows`` rounded down to a
    multiple of ``--views`` (at least one image's views), so a shard holds whole images
    and an interrupted run never commits some of an image's views (the Ray partitions,
    ``--shard-rows / --views`` images, hold the same rows)."""
    return max(1, shard_rows // views) * views


def aligned_cut(count: int, rows: int, shard_rows: int, one: bool = False) -> int:
    """How many of ``rows`` new rows fill shards that end at multiples of ``shard_rows``,
    for a store of ``count`` rows: all whole shards (0 when the first is not full), or
    with ``one`` the first shard only (at most ``rows``)."""
    room = shard_rows - count % shard_rows
    if one:
        return min(rows, room)
    return 0 if rows < room else room + (rows - room) // shard_rows * shard_rows
