"""Stores on object storage (``s3://bucket/store``): the store format, without rename.

The same layout and manifest as a local store (docs/formats.md), committed differently:

- Every object a writer puts carries the writer's random token in its name
  (``embeddings-00003-1a2b3c4d.npy``, ``items-00004-1a2b3c4d.parquet``,
  ``errors-1a2b3c4d-00002.jsonl``), so two writers never write the same object, and
  nothing a manifest names is ever overwritten.
- ``manifest.json`` is written last, with a conditional write: ``If-None-Match: *``
  for a new store, ``If-Match: <the ETag this writer read or wrote>`` after that. Of two
  writers only the first commits; the other gets one line, removes what it put, and
  has changed nothing. This replaces the lock file of a local store.
- A reader fetches the manifest, then each object it names, and checks every object's
  size and sha256 (always: the bytes are in hand) and each shard's ``.npy`` header; an
  object that vanished because a writer committed meanwhile makes it read the new
  manifest and try again. A reader that opens the store without ``verify`` reads each
  shard's rows by byte ranges instead, checked by the shard's block checksums
  (:mod:`pairkit.core.ranged_shard`).
- Objects no manifest names (a killed writer's, or a losing writer's it could not
  remove) are invisible; the next writer removes those older than a day.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import json
import secrets
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.integrity import seal, shard_sums
from pairkit.core.manifest import (
    ERRORS_RE,
    FORMAT,
    FORMAT_VERSION,
    ITEMS_RE,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    SHARD_BLOCK_BYTES,
    SHARD_RE,
    check_store_dtype,
    parse_manifest,
)
from pairkit.core.remote import (
    CommitConflict,
    check_bucket,
    check_writable,
    join,
    list_names,
    put,
    put_if,
    read_bytes,
    read_tagged,
    remove,
)
from pairkit.core.shard_book import ShardBook
from pairkit.errors import PairkitError, StoreError, UsageError

if TYPE_CHECKING:
    import pandas as pd

    from pairkit.core.store import Store

OPEN_ATTEMPTS = 8
STALE_SECONDS = 24 * 3600  # unnamed objects older than this belong to no live writer
_PREPARED: dict[str, tuple[str | None, set[str]]] = {}  # url -> (manifest tag, old names)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def is_ours(name: str) -> bool:
    return name == MANIFEST or bool(SHARD_RE.match(name) or ITEMS_RE.match(name)
                                    or ERRORS_RE.match(name))


def manifest_bytes(url: str) -> tuple[bytes, str | None]:
    """The manifest's bytes and version tag; StoreError when there is none."""
    try:
        return read_tagged(join(url, MANIFEST), MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        names = list_names(url)
        if any(SHARD_RE.match(n) for n in names):
            raise StoreError(f"store {url} is half-written: no {MANIFEST} (rerun the command "
                             "that made it)") from None
        if not names:
            check_bucket(url)  # a missing bucket named as such
        raise StoreError(f"{url} is not a pairkit store: no {MANIFEST}") from None
    except (StoreError, UsageError):
        raise
    except PairkitError as exc:
        raise StoreError(str(exc)) from None


def read_remote_manifest(url: str) -> dict[str, Any]:
    return parse_manifest(url, manifest_bytes(url)[0])  # type: ignore[arg-type]


def _object(url: str, rec: dict[str, Any], what: str) -> bytes:
    """An object the manifest names, checked against its size and sha256."""
    name = rec["file"]
    try:
        data = read_bytes(join(url, name), max_bytes=int(rec["bytes"]) + 1)
    except FileNotFoundError:
        raise StoreError(f"store {url}: {what} {name} is missing") from None
    except PairkitError as exc:
        raise StoreError(f"store {url}: {what} {name}: {exc}") from None
    if len(data) != rec["bytes"]:
        raise StoreError(f"store {url}: {what} {name} is {len(data)} bytes, manifest says "
                         f"{rec['bytes']} (object changed or damaged)")
    if hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise StoreError(f"store {url}: {what} {name} checksum mismatch (object changed or "
                         "damaged)")
    return data


def shard_array(url: str, rec: dict[str, Any], dim: int, dtype: str) -> np.ndarray:
    """One shard's rows (read-only, shape (rows, dim)) from its verified object."""
    from pairkit.core.ranged_shard import npy_header

    data = _object(url, rec, "shard")
    try:
        shape, fortran, dt, offset = npy_header(data)
    except ValueError as exc:
        raise StoreError(f"store {url}: shard {rec['file']} is unreadable ({exc})") from None
    if str(dt) != dtype or tuple(shape) != (rec["rows"], dim) or fortran:
        raise StoreError(f"store {url}: shard {rec['file']} is {dt} {tuple(shape)}, manifest "
                         f"says {dtype} ({rec['rows']}, {dim})")
    if len(data) != offset + rec["rows"] * dim * dt.itemsize:
        raise StoreError(f"store {url}: shard {rec['file']} is {len(data)} bytes, its header "
                         f"says {offset + rec['rows'] * dim * dt.itemsize}")
    return np.frombuffer(data, dtype=dt, count=rec["rows"] * dim, offset=offset).reshape(
        rec["rows"], dim)


def open_remote(cls: type[Store], url: str, verify: bool = True) -> Store:
    """The last committed snapshot of the store at ``url``: every object fetched and
    verified now; with ``verify`` False only the manifest is read now, the item table
    when first used (verified then) and each shard's rows by byte ranges when they are
    read (:class:`pairkit.core.ranged_shard.RangedShard`, verified then): what a process
    that plans (the driver of a Ray run) or reads some rows (a worker) needs, without
    holding the vectors."""
    for attempt in range(OPEN_ATTEMPTS):
        raw, tag = manifest_bytes(url)
        manifest = parse_manifest(url, raw)  # type: ignore[arg-type]
        if manifest["format_version"] < 2:
            raise StoreError(f"store {url} has format 1, which pairkit reads from local "
                             "folders only: copy it here and rerun embed or import")
        store = cls(url, manifest, raw)  # type: ignore[arg-type]
        if not verify:
            from pairkit.core.ranged_shard import RangedShard

            store.hold([RangedShard(url, s, store.dim, store.dtype)  # type: ignore[misc]
                        for s in manifest["shards"]], None)
            store.tag = tag
            return store
        try:
            arrays = [shard_array(url, s, store.dim, store.dtype) for s in manifest["shards"]]
            items_raw = (_object(url, manifest["items"], "item table")
                         if manifest.get("items") is not None else None)
            store.hold(arrays, items_raw)
        except StoreError:
            with contextlib.suppress(StoreError):
                if manifest_bytes(url)[1] != tag:
                    time.sleep(0.05 * (attempt + 1))
                    continue  # a writer committed while we read: take the new snapshot
            raise
        store.tag = tag
        return store
    raise StoreError(f"store {url} kept changing while it was opened")


def read_errors(url: str, rec: dict[str, Any]) -> bytes:
    return _object(url, rec, "errors file")


def read_items(url: str, rec: dict[str, Any]) -> bytes:
    """The item table's bytes (a store opened without ``verify``: read when first used)."""
    return _object(url, rec, "item table")


def prepare_remote(url: str, force: bool) -> str:
    """Check that ``url`` can receive a new store (``force``: replace the one there); the
    commit of the new store is conditional on what was found here."""
    check_writable(url, "a store")
    check_bucket(url)  # before the work, not when the first shard is put
    names = list_names(url)
    if MANIFEST in names:
        raw, tag = manifest_bytes(url)
        if not force:
            raise PairkitError(f"store {url} exists; pass --force to replace it")
        old = parse_manifest(url, raw)  # type: ignore[arg-type]
        _PREPARED[url] = (tag, _named(old))
    else:
        others = [n for n in names if not is_ours(n)]
        if others:
            raise PairkitError(f"output {url} holds objects that are not a pairkit store "
                               f"({others[0]}); choose another prefix")
        _PREPARED[url] = (None, set())
    return url


def _named(manifest: dict[str, Any]) -> set[str]:
    names = {s["file"] for s in manifest.get("shards", [])}
    for key in ("items", "errors"):
        if manifest.get(key):
            names.add(manifest[key]["file"])
    return names


def write_shard_object(url: str, name: str, normed: np.ndarray) -> dict[str, Any]:
    """Put ``normed`` (already normalised, store dtype) as the object ``url/name``;
    returns ``{file, rows, bytes, sha256, blocks}`` (invisible until a manifest names
    it; ``blocks``: its block checksums, docs/formats.md)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(normed))
    data = buf.getvalue()
    put(join(url, name), data)
    return {"file": name, "rows": len(normed), **shard_sums(buf, SHARD_BLOCK_BYTES)}


class RemoteStoreWriter(ShardBook):
    """:class:`pairkit.core.store_writer.StoreWriter` for a store on object storage
    (same methods; see the module docstring for the commit)."""

    def __init__(self, url: str, manifest: dict[str, Any], items: pd.DataFrame,
                 tag: str | None, replaced: set[str] | None = None) -> None:
        self.root = url
        self.manifest = manifest
        self.items = items
        self.tag = tag
        self.token = secrets.token_hex(4)
        self._items_dirty = False
        self._pending: set[str] = set()  # objects put since the last commit
        self._replaced = replaced or set()  # objects of the store this one replaces
        self._errors_seq = 0
        self._committed = _named(manifest)  # what the last committed manifest names

    def close(self) -> None:
        """Nothing to release (no lock); uncommitted objects stay invisible."""

    def __enter__(self) -> RemoteStoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def create(cls, url: str, dim: int, dtype: str = "float16",
               encoder: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
               commit: bool = True) -> RemoteStoreWriter:
        import pandas as pd

        from pairkit import __version__
        from pairkit.core.items import normalize_items

        check_store_dtype(dtype)
        if url not in _PREPARED:
            prepare_remote(url, force=False)
        tag, replaced = _PREPARED.pop(url)
        manifest: dict[str, Any] = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "dim": int(dim), "count": 0,
            "dtype": dtype, "normalized": True, "encoder": encoder or {},
            "pairkit_version": __version__, "created": _now(), "shards": [], "items": None,
            "errors": None,
        }
        manifest.update(extra or {})
        writer = cls(url, manifest, normalize_items(pd.DataFrame({"path": []})), tag, replaced)
        if commit:
            writer.commit()
        return writer

    @classmethod
    def resume(cls, url: str) -> RemoteStoreWriter:
        """Reopen the store at ``url`` for appending (verified); removes stale objects."""
        from pairkit.core.store import Store

        check_writable(url, "a store")
        store = Store.open(url, verify=True)
        writer = cls(url, dict(store.manifest), store.items.copy(), store.tag)
        writer._remove_stale()
        return writer

    def _remove_stale(self) -> None:
        named = _named(self.manifest)
        cutoff = time.time() - STALE_SECONDS
        for name, info in list_names(self.root).items():
            modified = info.get("LastModified") or info.get("mtime")
            stamp = modified.timestamp() if hasattr(modified, "timestamp") else None
            if name != MANIFEST and is_ours(name) and name not in named and stamp is not None \
                    and stamp < cutoff:
                with contextlib.suppress(PairkitError):
                    remove(join(self.root, name))

    def next_shard_name(self, offset: int = 0) -> str:
        """A shard name no committed shard has, with this writer's token."""
        return f"embeddings-{self.next_shard_number(offset):05d}-{self.token}.npy"

    def add_shard(self, vectors: np.ndarray, items: pd.DataFrame) -> None:
        """Put one shard (normalised, non-finite rows refused: the local writer's
        :func:`~pairkit.core.store_writer.write_shard`); named at the next commit."""
        from pairkit.core.store_writer import write_shard

        vectors = self.checked_vectors(vectors, items)
        if len(vectors) == 0:
            return
        name = self.next_shard_name()
        self._pending.add(name)
        record = write_shard(self.root, name, vectors, self.manifest["dtype"])
        self.add_written_shard(record, items)

    def _shard_size(self, name: str) -> int:
        from pairkit.core.remote import filesystem

        self._pending.add(name)  # put since the last commit: removed if this one loses
        fs, path = filesystem(join(self.root, name))
        return fs.size(path)

    def set_errors(self, errors: list[dict[str, Any]]) -> bool:
        """Put the error records as a new object; named at the next commit."""
        from pairkit.core.store_writer import json_line

        before = self.manifest.get("errors")
        if not errors:
            self.manifest["errors"] = None
            return before is not None
        data = "".join(json_line(e) + "\n" for e in errors).encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        if before and before.get("sha256") == digest and before.get("rows") == len(errors):
            return False
        self._errors_seq += 1
        name = f"errors-{self.token}-{self._errors_seq:05d}.jsonl"
        self._pending.add(name)
        put(join(self.root, name), data)
        self.manifest["errors"] = {"file": name, "bytes": len(data), "sha256": digest,
                                   "rows": len(errors)}
        return True

    def commit(self) -> None:
        """The item table (a new object), then the manifest, conditionally: PairkitError
        when another writer committed since this one read or wrote the manifest."""
        if self._items_dirty:
            name = f"items-{len(self.manifest['shards']):05d}-{self.token}.parquet"
            buf = io.BytesIO()
            self.items.reset_index(drop=True).to_parquet(buf, index=False)
            data = buf.getvalue()
            self._pending.add(name)
            put(join(self.root, name), data)
            self.manifest["items"] = {"file": name, "bytes": len(data),
                                      "sha256": hashlib.sha256(data).hexdigest(),
                                      "rows": self.count}
            self._items_dirty = False
        self.manifest["updated"] = _now()
        sealed = seal(self.manifest)
        text = json.dumps(sealed, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
        try:
            self.tag = put_if(join(self.root, MANIFEST), text.encode("ascii"), self.tag)
        except CommitConflict:
            self._abandon()
            raise PairkitError(
                f"store {self.root} was committed by another writer while this one was "
                "writing (one writer at a time): this run's uncommitted rows were dropped; "
                "rerun to resume") from None
        self.manifest = sealed
        now_named = _named(sealed)
        gone = (self._committed | self._replaced | self._pending) - now_named
        self._committed = now_named
        self._pending = set()
        self._replaced = set()
        for name in gone:  # superseded: item tables, error lists, a replaced store's
            with contextlib.suppress(PairkitError):
                remove(join(self.root, name))

    def discard(self) -> None:
        """Remove the objects written since the last commit (as
        :meth:`pairkit.core.store_writer.StoreWriter.discard` does for files): a write that
        failed gives their space back now."""
        self._abandon()

    def _abandon(self) -> None:
        for name in self._pending:
            with contextlib.suppress(PairkitError):
                remove(join(self.root, name))
        self._pending = set()
