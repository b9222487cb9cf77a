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
    read once per process; a store on object storage is fetched whole (verified) and held
    by the process. With ``lazy`` or ``ranged`` a store on object storage is opened by its
    manifest instead, and the rows a worker reads are fetched by byte ranges, each checked
    as it is read (:class:`pairkit.core.ranged_shard.RangedShard`: the shard's block
    checksums, or its sha256 streamed once for an older store): for workers that read
    some of the rows once (``mine --ray``'s partitions of the IVF lists and their
    anchors, ``eval --ray``'s shards of the references, ``dedup --ray``'s searches),
    which fetch those and never hold the store; not for reads of rows scattered over the
    store again and again (the easy negatives' or a label's positives' scores), which
    would fetch its blocks again each time. A local store is memory-mapped and verified
    at open either way."""

    store: str
    content_id: str
    streamed: bool = False
    lazy: bool = False
    ranged: bool = False
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
                "streamed": self.streamed, "lazy": self.lazy, "ranged": self.ranged,
                "pinned": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)

    def open(self, verify: bool) -> Any:
        """The store (:class:`pairkit.core.store.Store`), refused in one line when it is
        no longer the one committed under ``content_id``; the ``pinned`` snapshot when
        there is one (every read of the run sees the same rows, whatever a writer
        commits meanwhile)."""
        from pairkit.core.store import Store
        from pairkit.errors import PairkitError

        if self.pinned is not None:
            return self.pinned
        # on object storage the rows are read by byte ranges, each checked as it is read
        st = Store.open(self.store, verify=verify and not self.by_ranges)
        if st.content_id != self.content_id:
            raise PairkitError(f"store {self.store} changed while it was being read "
                               f"(content id {st.content_id}, not {self.content_id}): "
                               "rerun the command")
        return st

    @property
    def by_ranges(self) -> bool:
        """Whether the rows are read by byte ranges (``lazy`` or ``ranged``, on object
        storage): nothing of the store is held."""
        from pairkit.core.remote import is_url

        return (self.lazy or self.ranged) and is_url(self.store)

    def load(self) -> Any:
        """The vectors (an array, or the :class:`~pairkit.core.shard_rows.ShardRows` with
        ``streamed``), read and verified once per process (kept for the next call). One
        store per process, and one copy of its rows held: rows read by ranges (which
        hold nothing) are kept beside it."""
        key = (self.content_id, self.streamed, self.by_ranges)
        if key not in LOADED:
            st = self.open(verify=True)
            for other in list(LOADED):
                if other[0] != self.content_id or not (other[2] or key[2]):
                    del LOADED[other]
            LOADED[key] = st.rows() if self.streamed else st.vectors(np.float32)
        return LOADED[key]


# StoreRows.load: (content id, streamed, read by ranges)
LOADED: dict[tuple[str, bool, bool], Any] = {}


def forget_loaded() -> None:
    """Drop what :meth:`StoreRows.load` keeps (a run done with the store in this process)."""
    LOADED.clear()
