"""The shard buffer: encoded rows wait here until they make a shard of the store.

One buffer serves the local loop (:func:`pairkit.encode.embedder.embed_folder`: a shard
every ``--shard-rows`` rows or ``--shard-seconds``) and the Ray partition workers
(:func:`pairkit.encode.embedder.embed_partition`: one shard per partition). Vectors stay
where the encoder left them (on the GPU) until :meth:`ShardBuffer.take`, which copies a
shard to the host in one transfer instead of one synchronising copy per batch.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pairkit.encode.batches import EncodedBatch


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

    def due(self, shard_rows: int, shard_seconds: float) -> bool:
        """Whether the rows held make a shard: ``shard_rows`` of them, or any after
        ``shard_seconds`` since the last :meth:`take`."""
        n = self.pending()
        return n >= shard_rows or (n > 0 and time.perf_counter() - self.since > shard_seconds)

    def take(self) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """The rows held, as (float32 (n, dim) array, one item dict per row), and forget
        them. (0, 0) and [] when none."""
        vectors, items = self._vectors, self._items
        self._vectors, self._items = [], []
        self.since = time.perf_counter()
        if not vectors:
            return np.zeros((0, 0), dtype=np.float32), []
        if isinstance(vectors[0], np.ndarray):
            return np.concatenate(vectors).astype(np.float32, copy=False), items
        import torch

        return torch.cat(vectors).float().cpu().numpy(), items
