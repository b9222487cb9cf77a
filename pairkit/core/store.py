"""The store: one folder of embedding shards, an item table and a manifest.

Layout (see docs/formats.md)::

    STORE/manifest.json          the commit point: names every file below
    STORE/items-00003.parquet    one row per item, in embedding order (versioned name)
    STORE/embeddings-00000.npy   float16/float32, rows L2-normalised
    STORE/errors-1a2b3c4d-00003.jsonl  files that could not be embedded (embed only;
                                 versioned name, errors.jsonl in older stores)

Writers (one at a time: core/lock.py) never change a file the manifest names: an
append writes a new shard and a new item table under new names, then replaces the
manifest atomically, then removes the item table the old manifest named. A reader
opens exactly the files its manifest names and pins them (open descriptors and memory
maps), checking sizes, shapes and, with ``verify``, sha256; if a file vanished or
changed because a writer committed meanwhile, it rereads the manifest and tries again.
So a reader sees the last committed snapshot, never a torn one.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from pairkit.core.integrity import sha256_fd, sha256_file
from pairkit.core.items import ITEM_COLUMNS, normalize_items
from pairkit.core.manifest import (
    DTYPES,
    ERRORS,
    ERRORS_RE,
    FORMAT,
    FORMAT_VERSION,
    ITEMS,
    ITEMS_RE,
    MANIFEST,
    SHARD_PATTERN,
    SHARD_RE,
    parse_manifest,
    read_manifest,
    read_manifest_bytes,
)
from pairkit.core.store_files import check_mapped, map_shard, open_regular, parquet_rows
from pairkit.errors import StoreError, UsageError

if TYPE_CHECKING:
    import pandas as pd

    from pairkit.core.shard_rows import ShardRows

__all__ = [
    "DTYPES", "ERRORS", "FORMAT", "FORMAT_VERSION", "ITEMS", "MANIFEST",
    "SHARD_PATTERN", "Shard", "Store", "is_store", "l2_normalize",
    "read_manifest", "sha256_file",
]

OPEN_ATTEMPTS = 20
INDEX_DIR = "index"  # saved indexes (pairkit.index.saved): STORE/index/<kind>.faiss, .json
INDEX_FILE_RE = re.compile(r"^[a-z0-9_]+\.(?:faiss|json)$")


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows divided by their L2 norm (float32, shape unchanged). Zero rows stay zero.

    Rows whose float32 norm overflows or underflows (components near 1e38 or 1e-30, or
    float64 beyond float32's range) are scaled by their largest component in float64
    first, so they come out unit length instead of zero."""
    source = np.asarray(x)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        x = source.astype(np.float32, copy=False)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        # the float32 norm is exact enough only well inside the float32 range
        odd = np.flatnonzero(~np.isfinite(norms[:, 0]) | (norms[:, 0] < 1e-15))
        out = x / np.maximum(norms, eps)
        if len(odd):
            rows = np.asarray(source[odd], dtype=np.float64)
            scale = np.abs(rows).max(axis=1, keepdims=True)
            rows = rows / np.where(scale > 0, scale, 1.0)
            rows_norm = np.linalg.norm(rows, axis=1, keepdims=True)
            out[odd] = (rows / np.where(rows_norm > 0, rows_norm, 1.0)).astype(np.float32)
    return out


def is_ours(name: str) -> bool:
    """Names pairkit writes in a store folder (never anything else is touched)."""
    return (name in (MANIFEST, ITEMS) or bool(SHARD_RE.match(name))
            or bool(ITEMS_RE.match(name)) or bool(ERRORS_RE.match(name)))


@dataclass(frozen=True)
class Shard:
    """One shard: rows ``start .. start + rows - 1`` of the store. ``bytes`` and ``start``
    are None in format-1 manifests."""

    file: str
    rows: int
    sha256: str
    start: int | None = None
    bytes: int | None = None


def _copy_on_write() -> bool:
    """Whether pandas copies a shared table's data when one of its sharers changes it
    (copy-on-write: always from pandas 3, an option in pandas 2)."""
    import pandas as pd

    if int(pd.__version__.split(".")[0]) >= 3:
        return True
    return pd.options.mode.copy_on_write is True


def codes_of(values: Any, missing: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of ``values`` (N,) (labels, sources, any hashable objects): ``(codes
    int64 (N,), distinct values object (U,))``, codes in order of first appearance.
    ``missing``: None/NaN get -1 (else a code of their own). An integer array (codes
    already, e.g. ``dedup --ray``'s sources) is renumbered without a Python object per
    row, its distinct values an integer array. The one place where pairkit turns labels
    and sources into codes."""
    import pandas as pd

    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":  # codes already
        codes, uniques = pd.factorize(values)  # (no missing value, no object per row)
        return codes.astype(np.int64), np.asarray(uniques)
    series = (values if isinstance(values, pd.Series)
              else pd.Series(np.asarray(values, dtype=object), dtype=object))
    codes, uniques = pd.factorize(series, use_na_sentinel=missing)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


class Store:
    """A read-only snapshot of a store folder. Open with :meth:`Store.open`."""

    def __init__(self, root: Path, manifest: dict[str, Any], raw: bytes = b"") -> None:
        self.root = root
        self.manifest = manifest
        self._raw = raw
        self._arrays: list[np.ndarray] = []
        self._items_fh: IO[bytes] | None = None
        self._errors_fh: IO[bytes] | None = None  # the error list named, pinned at open
        self._errors_raw: bytes | None = None  # its bytes, once read
        self._items_raw: bytes | None = None
        self._items: pd.DataFrame | None = None
        self._vectors: np.ndarray | None = None
        self.tag: str | None = None  # object storage: the manifest's version (ETag)

    @property
    def is_remote(self) -> bool:
        """True for a store on object storage (``root`` is then its URL, a str)."""
        return isinstance(self.root, str)

    @property
    def local_root(self) -> Path | None:
        """The store folder, or None on object storage (no saved indices there)."""
        return None if self.is_remote else self.root

    def hold(self, arrays: list[np.ndarray], items_raw: bytes | None) -> None:
        """Hold a snapshot read elsewhere (object storage, :mod:`pairkit.core.remote_store`):
        its shard arrays (n_i, dim) and the item table's bytes (None: not in the manifest)."""
        self._arrays = arrays
        self._items_raw = items_raw

    # -- opening and validation -------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], verify: bool = True) -> Store:
        """Open the last committed snapshot of a store; StoreError naming any problem.

        Always checked: the manifest (checksum, every field), each shard's size, shape and
        dtype, the item table's size, and (when the items are read) its sha256, row count
        and ids. ``verify`` also checks every shard's and the item table's sha256 now
        (reads every byte once). ``path`` may be a URL (``s3://bucket/store``): every
        object is then fetched and always verified (core/remote_store.py); without
        ``verify`` only the manifest now, the item table when first read (verified then),
        and the shards' rows by byte ranges as they are read, each checked by the shard's
        block checksums (core/ranged_shard.py): no shard held.
        """
        from pairkit.core.remote import is_url, location

        if is_url(path):
            from pairkit.core.remote_store import open_remote

            return open_remote(cls, str(path), verify)
        root = Path(location(path))
        if not root.exists():
            raise StoreError(f"store {root} not found")
        if not root.is_dir():
            raise StoreError(f"{root} is a file, not a store folder")
        for attempt in range(OPEN_ATTEMPTS):
            raw = read_manifest_bytes(root)
            store = cls(root, parse_manifest(root, raw), raw)
            try:
                store._pin(verify)
            except StoreError:
                if not _manifest_moved(root, raw):
                    raise
            else:
                # verified bytes prove themselves; unverified ones need an unchanged manifest
                if verify or not _manifest_moved(root, raw):
                    return store
            # a writer committed while we opened: read the new snapshot, after a pause
            # that grows (a writer's burst of commits outlasts back-to-back retries)
            time.sleep(min(0.01 * (attempt + 1), 0.1))
        raise StoreError(f"store {root} kept changing while it was opened: is a writer "
                         "replacing it (--force) in a loop?")

    def _pin(self, verify: bool) -> None:
        """Open every file the manifest names and check it (see :meth:`open`)."""
        self._pin_errors()
        arrays = []
        for shard in self.shards:
            with open_regular(self.root / shard.file, "shard") as fh:
                arrays.append(map_shard(fh, self.root, shard, self.dim, self.dtype))
                if verify and sha256_fd(fh) != shard.sha256:
                    raise StoreError(f"store {self.root}: shard {shard.file} checksum mismatch "
                                     "(file changed or damaged)")
        self._arrays = arrays
        if self.format_version >= 2:
            rec = self.manifest.get("items")
            if rec is None:
                return
            fh = open_regular(self.root / rec["file"], "item table")
            size = os.fstat(fh.fileno()).st_size
            if size != rec["bytes"]:
                fh.close()
                raise StoreError(f"store {self.root}: item table {rec['file']} is {size} bytes, "
                                 f"manifest says {rec['bytes']} (file changed or damaged)")
            self._items_fh = fh
            if verify:
                self._items_raw = self._read_items_bytes()
            return
        items_path = self.root / ITEMS
        if not items_path.exists():
            if self.count:
                raise StoreError(f"store {self.root}: {ITEMS} is missing")
            return
        self._items_fh = open_regular(items_path, "item table")
        n_items = parquet_rows(self._items_fh, items_path)
        if n_items != self.count:
            raise StoreError(f"store {self.root}: row count mismatch: {ITEMS} has {n_items} rows, "
                             f"manifest says {self.count}")

    def _pin_errors(self) -> None:
        """Hold the error list the manifest names (read by :meth:`read_errors`), so a
        writer's next commit, which removes it, can't take it from this snapshot. One
        that is missing now is named when it is read (only ``info`` reads it)."""
        rec = self.manifest.get("errors")
        if rec is None:
            return
        try:
            self._errors_fh = open_regular(self.root / rec["file"], "errors file")
        except (OSError, StoreError):
            if _manifest_moved(self.root, self._raw):
                raise StoreError(f"store {self.root}: {rec['file']} vanished (a writer "
                                 "committed)") from None

    def _read_items_bytes(self) -> bytes:
        """The item table's bytes from the pinned file (object storage: the object),
        checked against the manifest."""
        if self.is_remote:
            from pairkit.core.remote_store import read_items

            return read_items(str(self.root), self.manifest["items"])
        assert self._items_fh is not None
        with self._items_fh as fh:
            fh.seek(0)
            data = fh.read()
        self._items_fh = None
        rec = self.manifest.get("items")
        if rec is not None:
            import hashlib

            if len(data) != rec["bytes"] or hashlib.sha256(data).hexdigest() != rec["sha256"]:
                raise StoreError(f"store {self.root}: item table {rec['file']} checksum "
                                 "mismatch (file changed or damaged)")
        return data

    # -- metadata ------------------------------------------------------------------
    @property
    def format_version(self) -> int:
        return int(self.manifest["format_version"])

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    @property
    def count(self) -> int:
        return int(self.manifest["count"])

    def __len__(self) -> int:
        return self.count

    @property
    def dtype(self) -> str:
        return str(self.manifest["dtype"])

    @property
    def shards(self) -> list[Shard]:
        return [Shard(s["file"], s["rows"], s["sha256"], s.get("start"), s.get("bytes"))
                for s in self.manifest.get("shards", [])]

    @property
    def encoder(self) -> dict[str, Any]:
        return dict(self.manifest.get("encoder") or {})

    @property
    def content_id(self) -> str:
        """16 hex chars identifying the store's rows (its shards' checksums and count).

        Stable across manifest rewrites and format upgrades; pair tables carry it as
        ``store_id`` so a table is never applied to another store by mistake.
        """
        import hashlib as _h

        digest = _h.sha256(
            json.dumps([self.count, [s.sha256 for s in self.shards]]).encode()
        ).hexdigest()
        return digest[:16]

    @property
    def manifest_hash(self) -> str:
        """sha256 of the manifest this snapshot was opened from."""
        import hashlib as _h

        return _h.sha256(self._raw).hexdigest() if self._raw else sha256_file(self.root / MANIFEST)

    # -- items ---------------------------------------------------------------------
    @property
    def items(self) -> pd.DataFrame:
        """The item table (id, path, source, view, label, file_sha256), one row per item.

        Each access gives a new DataFrame, so a caller's edits never reach the table the
        store object caches (and every later call reads): with pandas' copy-on-write (always
        on from pandas 3) a shallow copy, which costs nothing until it is changed; on pandas
        2 without it, a copy of the table (the store's own column reads, :meth:`labels`,
        :meth:`source_codes` ..., read the cached table: no copy)."""
        return self._table().copy(deep=not _copy_on_write())

    def _table(self) -> pd.DataFrame:
        """The cached item table itself (parsed on first use): for reads that change
        nothing; what leaves the store is :attr:`items`' copy."""
        import pandas as pd

        if self._items is None:
            if self.count == 0:
                self._items = normalize_items(pd.DataFrame({"path": []}))
            else:
                raw = self._items_raw if self._items_raw is not None else \
                    self._read_items_bytes()
                self._items_raw = None
                self._items = self._parse_items(raw)
        return self._items

    def _parse_items(self, raw: bytes) -> pd.DataFrame:
        import pandas as pd

        name = (self.manifest.get("items") or {}).get("file", ITEMS)
        try:
            items = pd.read_parquet(io.BytesIO(raw))
        except Exception as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
            raise StoreError(f"store {self.root}: item table {name} is unreadable ({first})") \
                from None
        missing = [c for c in ITEM_COLUMNS if c not in items.columns]
        if missing:
            raise StoreError(f"store {self.root}: item table {name} lacks {', '.join(missing)}")
        if len(items) != self.count:
            raise StoreError(f"store {self.root}: row count mismatch: {name} has {len(items)} "
                             f"rows, manifest says {self.count}")
        ids = items["id"].to_numpy()
        if ids.dtype.kind not in "iu" or not np.array_equal(ids, np.arange(self.count)):
            raise StoreError(f"store {self.root}: item table {name} ids are not 0..{self.count - 1}"
                             " in order (damaged)")
        return items

    @property
    def has_labels(self) -> bool:
        return bool(self._table()["label"].notna().any()) if self.count else False

    def labels(self) -> np.ndarray | None:
        """Label of each item as a new object array (None where missing), or None."""
        if not self.has_labels:
            return None
        return self._table()["label"].to_numpy(dtype=object, na_value=None)

    def source_codes(self) -> np.ndarray:
        """int64 code per item; items with equal codes share a source. Shape (N,)."""
        return codes_of(self._table()["source"])[0]

    def label_codes(self) -> np.ndarray | None:
        """int64 code per item, -1 where the label is missing (:func:`codes_of`); None
        without labels. Shape (N,)."""
        return codes_of(self._table()["label"])[0] if self.has_labels else None

    def read_errors(self) -> list[dict[str, Any]]:
        """The records of the error list that the manifest committed (``errors.jsonl`` or
        a versioned ``errors-TOKEN-NNNNN.jsonl``; checked against its sha256); empty when
        there are none. The file is pinned when the store opens, so a writer's later
        commit doesn't take it from this snapshot."""
        rec = self.manifest.get("errors")
        if rec is None:
            return []
        if self._errors_raw is not None:
            data = self._errors_raw
        elif self.is_remote:
            from pairkit.core.remote_store import read_errors

            data = read_errors(str(self.root), rec)
        else:
            fh = self._errors_fh or open_regular(self.root / rec["file"], "errors file")
            self._errors_fh = None
            with fh:
                fh.seek(0)
                data = fh.read(rec["bytes"] + 1)
        import hashlib

        if len(data) != rec["bytes"] or hashlib.sha256(data).hexdigest() != rec["sha256"]:
            raise StoreError(f"store {self.root}: {rec['file']} does not match the manifest "
                             "(changed or damaged)")
        self._errors_raw = data
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line]

    # -- vectors -------------------------------------------------------------------
    def shard_arrays(self) -> list[np.ndarray]:
        """Memory-mapped (read-only) arrays, one per shard, in row order."""
        return list(self._arrays)

    def vectors(self, dtype: str | np.dtype = np.float32) -> np.ndarray:
        """All embeddings as one C-contiguous array of shape (N, dim) in ``dtype``.

        Loads the store into memory (N * dim * itemsize bytes); cached: every later call
        and search of this store object reads the same array, so what it returns is a
        read-only view of it whose flag can't be set back (change a ``.copy()``). ``dtype``:
        float16, float32 or float64. Use :meth:`iter_blocks` to stream instead.
        """
        try:
            if dtype is None:  # numpy reads None as float64: not a choice made
                raise TypeError
            dtype = np.dtype(dtype)
        except TypeError:
            raise UsageError(f"dtype must be float16, float32 or float64, got {dtype!r}") from None
        if dtype not in (np.float16, np.float32, np.float64):
            raise UsageError(f"dtype must be float16, float32 or float64, got {dtype}")
        if self._vectors is None or self._vectors.dtype != dtype:
            out = np.empty((self.count, self.dim), dtype=dtype)
            start = 0
            for arr, name in zip(self._arrays, self._shard_names(), strict=True):
                check_mapped(arr, name)
                out[start : start + len(arr)] = arr
                start += len(arr)
            out.flags.writeable = False
            self._vectors = out
        # a new view each call: the cache's own flag can be set back, a view's can't
        view = self._vectors.view()
        view.flags.writeable = False
        return view

    def rows(self) -> ShardRows:
        """The rows read in place from the shards (:class:`pairkit.core.shard_rows.ShardRows`,
        the stored dtype): what a pass over the store needs without :meth:`vectors`' copy."""
        from pairkit.core.shard_rows import ShardRows

        return ShardRows(self._arrays, self.dim, self.dtype, self._shard_names())

    def _shard_names(self) -> list[str]:
        """``store ROOT: shard FILE`` for each array held, for a message (``shard I`` when
        the arrays held are not the manifest's shards: a snapshot held without them)."""
        if len(self._arrays) != len(self.shards):
            return [f"store {self.root}: shard {i}" for i in range(len(self._arrays))]
        return [f"store {self.root}: shard {s.file}" for s in self.shards]

    @property
    def items_parsed(self) -> bool:
        """Whether the item table is parsed already (:attr:`items` was read)."""
        return self._items is not None

    def item_columns(self, *names: str) -> list[Any]:
        """Columns of the item table as pyarrow arrays (one chunk each), read without
        building the pandas table (:attr:`items`, whose paths are Python objects once
        converted); from the parsed table when it is read already. Checked as
        :attr:`items` is (sha256, row count)."""
        import pyarrow as pa

        if self._items is not None or self.count == 0:
            return [pa.array(self._table()[name]) for name in names]
        import pyarrow.parquet as pq

        raw = self.items_bytes()  # kept for the whole table, if it is asked for later
        file = (self.manifest.get("items") or {}).get("file", ITEMS)
        try:
            table = pq.read_table(io.BytesIO(raw), columns=list(names))
        except Exception as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
            raise StoreError(f"store {self.root}: item table {file} is unreadable "
                             f"({first})") from None
        if table.num_rows != self.count:
            raise StoreError(f"store {self.root}: row count mismatch: {file} has "
                             f"{table.num_rows} rows, manifest says {self.count}")
        return [table.column(name).combine_chunks() for name in names]

    def item_batches(self, name: str, rows: int = 1 << 16) -> Iterator[Any]:
        """The item table's column ``name`` as pyarrow arrays of at most ``rows`` rows, in
        order, decoded batch by batch from the table's file (never the whole column at
        once; checked as :attr:`items` is); from the parsed table when it is read already."""
        import pyarrow as pa

        if self._items is not None or self.count == 0:
            whole = pa.array(self._table()[name])
            for s in range(0, len(whole), rows):
                yield whole.slice(s, rows)
            return
        import pyarrow.parquet as pq

        file = (self.manifest.get("items") or {}).get("file", ITEMS)
        seen = 0
        try:
            reader = pq.ParquetFile(io.BytesIO(self.items_bytes()))
            for batch in reader.iter_batches(batch_size=rows, columns=[name]):
                seen += batch.num_rows
                yield batch.column(0)
        except Exception as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
            raise StoreError(f"store {self.root}: item table {file} is unreadable "
                             f"({first})") from None
        if seen != self.count:
            raise StoreError(f"store {self.root}: row count mismatch: {file} has "
                             f"{seen} rows, manifest says {self.count}")

    def items_bytes(self) -> bytes:
        """The item table's file as committed (checked against the manifest), kept until
        the table is parsed or released; empty for a store of no rows."""
        if self._items is not None:
            raise StoreError(f"store {self.root}: the item table was parsed already")
        if self.count == 0:
            return b""
        if self._items_raw is None:
            self._items_raw = self._read_items_bytes()
        return self._items_raw

    def release_items(self) -> None:
        """Forget the item table (parsed, or its bytes), for a caller done with it (its
        memory freed). The pinned file was read when the items were parsed: open the
        store again to read them again."""
        self._items = None
        self._items_raw = None

    def release_vectors(self) -> None:
        """Forget the array :meth:`vectors` keeps (the next call reads the shards again)."""
        self._vectors = None

    def iter_blocks(
        self, rows: int = 65536, dtype: str | np.dtype = np.float32
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start_row, block)`` with blocks of at most ``rows`` rows, in order."""
        start = 0
        for arr, name in zip(self._arrays, self._shard_names(), strict=True):
            for i in range(0, len(arr), rows):
                check_mapped(arr, name)
                block = np.asarray(arr[i : i + rows], dtype=dtype)
                yield start + i, block
            start += len(arr)


def _manifest_moved(root: Path, raw: bytes) -> bool:
    try:
        return read_manifest_bytes(root) != raw
    except StoreError:
        return True


def is_store(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder (or object prefix) with a pairkit manifest."""
    try:
        read_manifest(path)
    except StoreError:
        return False
    return True
