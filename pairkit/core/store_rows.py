"""Where a command's workers read a store themselves: :class:`StoreRows` (a location
and the content id it must still have), and what each process keeps of it (one store per
process, read once for a whole run).

The driver of a run on a cluster hands its workers a :class:`StoreRows` instead of the
vectors (``mine --ray``'s blocks, ``dedup --ray``'s searches, ``eval --ray``'s shards
of the references: :mod:`pairkit.core.row_view`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StoreRows:
    """Where the blocks read the store's vectors themselves (the store as committed under
    ``content_id``; ``store`` an absolute path every node sees, or a URL) instead of
    receiving them: a cluster's workers, or this process. With ``streamed`` (the parts
    path of :mod:`pairkit.mine.parts_run` on the CPU: here, and on every worker) the rows
    are read in place from the shards (:class:`pairkit.core.shard_rows.ShardRows`: no copy
    of the store; the index built from them shard by shard, an IVF index's lists in the
    store's float16: :func:`pairkit.index.faiss_build.build_index`); else the float32 copy,
    read once per process. With ``lazy`` or ``streamed`` a store on object storage is
    opened by its manifest, and the rows a worker reads are fetched by byte ranges, each
    checked as it is read (:class:`pairkit.core.ranged_shard.RangedShard`: the shard's
    block checksums, or its sha256 streamed once for an older store): a worker that reads
    some of the rows (a partition's IVF lists, its blocks' anchors, ``eval --ray``'s
    shards of the references) fetches those, never holds the store; a local store is
    memory-mapped and verified at open either way."""

    store: str
    content_id: str
    streamed: bool = False
    lazy: bool = False
    # this process's snapshot of the store, opened (and verified) once for the whole run
    pinned: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, store: Any, **options: Any) -> StoreRows:
        """The :class:`StoreRows` of the opened ``store`` (a
        :class:`~pairkit.core.store.Store`): its folder as an absolute path, or its URL;
        ``options``: the other fields."""
        root = store.local_root
        where = str(Path(root).resolve()) if root is not None else str(store.root)
        return cls(where, store.content_id, **options)

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store, "content_id": self.content_id,
                "streamed": self.streamed, "lazy": self.lazy, "pinned": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)

    def open(self, verify: bool) -> Any:
        """The store (:class:`pairkit.core.store.Store`), refused in one line when it is
        no longer the one committed under ``content_id``; the ``pinned`` snapshot when
        there is one (every read of the run sees the same rows, whatever a writer
        commits meanwhile)."""
        from pairkit.core.remote import is_url
        from pairkit.core.store import Store
        from pairkit.errors import PairkitError

        if self.pinned is not None:
            return self.pinned
        # on object storage the rows are read by byte ranges, each checked as it is read
        ranged = (self.lazy or self.streamed) and is_url(self.store)
        st = Store.open(self.store, verify=verify and not ranged)
        if st.content_id != self.content_id:
            raise PairkitError(f"store {self.store} changed while it was being read "
                               f"(content id {st.content_id}, not {self.content_id}): "
                               "rerun the command")
        return st

    def load(self) -> Any:
        """The vectors (an array, or the :class:`~pairkit.core.shard_rows.ShardRows` with
        ``streamed``), read and verified once per process (kept for the next call)."""
        key = (self.content_id, self.streamed, self.lazy)
        if key not in LOADED:
            st = self.open(verify=True)
            LOADED.clear()  # one store per process
            LOADED[key] = st.rows() if self.streamed else st.vectors(np.float32)
        return LOADED[key]


LOADED: dict[tuple[str, bool, bool], Any] = {}  # StoreRows.load: (content id, streamed, lazy)


def forget_loaded() -> None:
    """Drop what :meth:`StoreRows.load` keeps (a run done with the store in this process)."""
    LOADED.clear()
