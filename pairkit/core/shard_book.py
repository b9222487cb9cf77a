"""What both store writers share (a folder's, :class:`pairkit.core.store_writer.StoreWriter`,
and object storage's, :class:`pairkit.core.remote_store.RemoteStoreWriter`): the count,
the checks of a new shard, a written shard's record and items added to the manifest not
yet committed, ``append`` and ``update``. Each writer writes its shards and commits in
its own way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.manifest import SHARD_RE
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import pandas as pd


class ShardBook:
    """The manifest and item table of a store being written (``root``, ``manifest``,
    ``items``; ``_items_dirty`` when the item table must be written at the commit)."""

    root: Any
    manifest: dict[str, Any]
    items: pd.DataFrame
    _items_dirty: bool

    @property
    def count(self) -> int:
        return int(self.manifest["count"])

    def add_shard(self, vectors: np.ndarray, items: pd.DataFrame) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def _shard_size(self, name: str) -> int:
        """Bytes of this writer's shard ``name`` (FileNotFoundError when it is gone)."""
        raise NotImplementedError

    def next_shard_number(self, offset: int = 0) -> int:
        """One past the highest number of a committed shard, plus ``offset`` (numbers for
        shards written in parallel, :mod:`pairkit.distributed.embed`)."""
        numbers = [int(m.group("number")) for s in self.manifest["shards"]
                   if (m := SHARD_RE.match(s["file"]))]
        return max(numbers, default=-1) + 1 + offset

    def checked_vectors(self, vectors: np.ndarray, items: pd.DataFrame) -> np.ndarray:
        """``vectors`` as an array (n, dim) for ``items`` (n rows); PairkitError when the
        dim or the row count does not match."""
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.manifest["dim"]:
            raise PairkitError(f"vectors have shape {tuple(vectors.shape)}, store dim is "
                               f"{self.manifest['dim']}")
        if len(items) != len(vectors):
            raise PairkitError(f"{len(items)} items for {len(vectors)} vectors")
        return vectors

    def add_written_shard(self, record: dict[str, Any], items: pd.DataFrame) -> None:
        """Add a shard already written for this store (by
        :func:`pairkit.core.store_writer.write_shard` or
        :func:`pairkit.core.remote_store.write_shard_object`; ``record`` as it returned)
        with its ``items``; visible at the next :meth:`commit`. The shard's size is
        checked against the record."""
        import pandas as pd

        from pairkit.core.items import normalize_items

        name = record["file"]
        if not SHARD_RE.match(name) or any(s["file"] == name for s in self.manifest["shards"]):
            raise PairkitError(f"internal: shard name {name!r} is taken or not a shard name")
        try:
            size = self._shard_size(name)
        except FileNotFoundError:
            raise PairkitError(f"store {self.root}: shard {name} vanished before its commit"
                               ) from None
        if size != record["bytes"] or int(record["rows"]) != len(items):
            raise PairkitError(f"store {self.root}: shard {name} does not match its record")
        new_items = normalize_items(items, start_id=self.count)
        self.items = new_items if self.count == 0 else pd.concat([self.items, new_items],
                                                                 ignore_index=True)
        shard = {"file": name, "rows": int(record["rows"]), "sha256": record["sha256"],
                 "start": self.count, "bytes": record["bytes"]}
        if record.get("blocks") is not None:  # block checksums (docs/formats.md)
            shard["blocks"] = record["blocks"]
        self.manifest["shards"].append(shard)
        self.manifest["count"] = self.count + int(record["rows"])
        self._items_dirty = True

    def append(self, vectors: np.ndarray, items: pd.DataFrame) -> None:
        """Write one shard and commit it (see :meth:`add_shard`)."""
        self.add_shard(vectors, items)
        self.commit()

    def update(self, **fields: Any) -> None:
        """Set manifest fields and commit."""
        self.manifest.update(fields)
        self.commit()
