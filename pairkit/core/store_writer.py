"""Writing stores: one writer at a time, every commit a valid snapshot.

An append writes the new shard (new name), then the whole item table under a new
name, then the manifest (atomic rename: the commit), then removes the item table the
old manifest named. Nothing a committed manifest names is ever changed in place, so
readers (store.py) always see a whole snapshot. Every writer holds the store's lock
(core/lock.py); under it, files left by killed writers (temps, unreferenced shards and
item tables) are removed.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit import __version__
from pairkit.core.atomic import (
    TEMP_RE,
    atomic_open,
    atomic_path,
    fsync_dir,
    fsync_file,
    remove_stale_temps,
)
from pairkit.core.integrity import dump_sealed, sha256_fd, shard_sums
from pairkit.core.items import normalize_items
from pairkit.core.lock import LOCK_NAME, is_held, writer_lock
from pairkit.core.manifest import (
    ERRORS,
    ERRORS_RE,
    FORMAT,
    FORMAT_VERSION,
    ITEMS,
    ITEMS_PATTERN,
    ITEMS_RE,
    MANIFEST,
    SHARD_BLOCK_BYTES,
    SHARD_PATTERN,
    SHARD_RE,
    check_store_dtype,
    read_manifest,
)
from pairkit.core.shard_book import ShardBook
from pairkit.core.store import INDEX_DIR, INDEX_FILE_RE, Store, is_ours, l2_normalize
from pairkit.core.store_files import open_regular, parquet_rows
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import pandas as pd


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def prepare_store_dir(path: str | os.PathLike[str], force: bool) -> Path:
    """Check that ``path`` can receive a new store (``force``: replace the one there).

    Refuses a path that is a file, a folder holding other files, or an existing
    store without ``force``. A folder left by a killed writer (pairkit files but no
    manifest: nothing committed) is cleared without ``force``. An existing store stays
    whole, readable, until the new store's first commit replaces it
    (:meth:`StoreWriter.create`). Only pairkit's own files are removed, under the
    folder's writer lock. On object storage (a URL) the same
    checks, and the new store's first commit is conditional on what was found
    (core/remote_store.py); returns the URL then.
    """
    from pairkit.core.remote import is_url, location

    if is_url(path):
        from pairkit.core.remote_store import prepare_remote

        return prepare_remote(str(path), force)  # type: ignore[return-value]
    root = Path(location(path))
    if root.exists() and not root.is_dir():
        raise PairkitError(f"output {root} is an existing file, expected a store folder")
    with writer_lock(root, "store"):
        remove_stale_temps(root, is_ours)
        if check_store_dir(root, force) and not (root / MANIFEST).exists():
            clear_store(root)  # nothing was committed: a killed writer's leftovers
    return root


def check_store_dir(root: Path, force: bool) -> bool:
    """Whether the local folder ``root`` holds files a new store there replaces (a killed
    writer's leftovers, or an old store with ``force``); PairkitError when it can't take
    one (a file, a folder of other files, a store without ``force``). Reads only: a
    command checks its output with it before any heavy work (:func:`prepare_store_dir`
    checks again under the lock)."""
    if root.exists() and not root.is_dir():
        raise PairkitError(f"output {root} is an existing file, expected a store folder")
    if not root.exists():
        return False
    entries = [e for e in root.iterdir() if e.name != LOCK_NAME and not our_temp(e.name)]
    if not entries:
        return False
    ours = [e for e in entries if is_ours(e.name) or is_our_index_dir(e)]
    if not (root / MANIFEST).exists():
        # a killed writer leaves a shard, a versioned item table or error list, or the
        # index/ of the store it replaced; items.parquet or errors.jsonl alone are as
        # likely a user's own files
        written = any(SHARD_RE.match(e.name) or ITEMS_RE.match(e.name)
                      or (ERRORS_RE.match(e.name) and e.name != ERRORS)
                      or e.name == INDEX_DIR for e in ours)
        if len(ours) < len(entries) or not written:
            raise PairkitError(f"output {root} is a folder that is not a pairkit store; "
                               "choose another path")
        return True  # nothing was committed: cleared without force
    if not force:
        raise PairkitError(f"store {root} exists; pass --force to replace it")
    return True


def our_temp(name: str) -> bool:
    """Whether ``name`` is the temp file of one of pairkit's store files (a killed
    writer's: :func:`~pairkit.core.atomic.remove_stale_temps` removes them)."""
    m = TEMP_RE.match(name)
    return bool(m) and is_ours(m.group("target"))


def clear_store(root: Path) -> None:
    """Remove pairkit's files from a store folder (never other files), its saved indexes
    too (:func:`is_our_index_dir`); the manifest goes first, so a reader never pairs it
    with files of the next store."""
    with contextlib.suppress(FileNotFoundError):
        (root / MANIFEST).unlink()
    for entry in root.iterdir():
        name = entry.name
        if is_our_index_dir(entry):
            remove_index_dir(entry)
        elif is_ours(name) or our_temp(name):  # a user's own .draft.tmp stays
            if entry.is_dir() and not entry.is_symlink():
                continue  # not something pairkit writes
            entry.unlink()


def is_our_index_dir(path: Path) -> bool:
    """Whether ``path`` is a store's ``index/`` folder holding nothing but pairkit's saved
    indexes (``<kind>.faiss``, ``<kind>.json``, their temp files): pairkit's, cleared
    with the store (a folder holding anything else is the user's)."""
    if path.name != INDEX_DIR or path.is_symlink() or not path.is_dir():
        return False
    for entry in path.iterdir():
        temp = TEMP_RE.match(entry.name)
        name = temp.group("target") if temp else entry.name
        if not INDEX_FILE_RE.match(name) or not entry.is_file() or entry.is_symlink():
            return False
    return True


def remove_index_dir(path: Path) -> None:
    """Remove a store's saved indexes (:func:`is_our_index_dir`), the description of each
    first (a kill in between leaves no description of missing bytes), then the folder."""
    names = sorted((e.name for e in path.iterdir()), key=lambda n: not n.endswith(".json"))
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (path / name).unlink()
    with contextlib.suppress(OSError):
        path.rmdir()


def _remove_unreferenced(root: Path, manifest: dict[str, Any]) -> None:
    """Remove shard, item and error files the manifest does not name (killed appends, old
    item tables and error lists; format 1's fixed names in a format-2 store). Only under
    the writer lock."""
    keep = {s["file"] for s in manifest["shards"]}
    for key in ("items", "errors"):
        if manifest.get(key):
            keep.add(manifest[key]["file"])
    for entry in os.scandir(root):
        name = entry.name
        stale = (SHARD_RE.match(name) or ITEMS_RE.match(name)
                 or (manifest["format_version"] >= 2
                     and (name == ITEMS or ERRORS_RE.match(name))))
        if stale and name not in keep and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


class StoreWriter(ShardBook):
    """Appends shards to a store; every commit leaves a valid store, readers never see a
    torn one. Holds the store's writer lock from create/resume until :meth:`close`.

    An append writes the shard (new name), then the whole item table under a new name,
    then the manifest (atomic rename: the commit), then removes the old item table.

    A new store made where a store is (``--force``) replaces it the same way: its files
    take names the old store's don't have, its first commit replaces the old manifest,
    and only then are the old store's files (and its saved indexes) removed; until
    then the old store is whole, and readers holding it keep reading it.
    """

    def __init__(self, root: Path, manifest: dict[str, Any], items: pd.DataFrame) -> None:
        self.root = root
        self.manifest = manifest
        self.items = items
        self._items_dirty = False
        self._errors_data: bytes | None = None  # set_errors' records, written at the commit
        self._errors_dirty = False
        self._errors_committed = (manifest.get("errors") or {}).get("file")
        self._token = secrets.token_hex(4)  # this writer's error files' names
        self._replaced: set[str] = set()  # the files of the store a new one replaces
        self._number_base = 0  # a new store's first shard number (past the old store's)
        self._uncommitted: list[str] = []  # files written since the last commit
        self._lock = contextlib.ExitStack()

    def _take_lock(self) -> None:
        """Hold the store's writer lock, or borrow it when this process holds it already
        (a command that locks around its whole run)."""
        if not is_held(self.root):
            self._lock.enter_context(writer_lock(self.root, "store"))

    def close(self) -> None:
        """Release the writer lock if this writer took it (uncommitted shards stay
        orphans, removed by the next writer)."""
        self._lock.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._lock.close()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dim: int,
        dtype: str = "float16",
        encoder: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        commit: bool = True,
    ) -> StoreWriter:
        """Start an empty store at ``path`` (the folder must be prepared by the caller).

        ``commit=False`` writes no manifest until the first :meth:`commit` (a store written
        in one go is never visible half-done). A URL gives a
        :class:`pairkit.core.remote_store.RemoteStoreWriter` (same methods).
        """
        import pandas as pd

        from pairkit.core.remote import is_url

        if is_url(path):
            from pairkit.core.remote_store import RemoteStoreWriter

            return RemoteStoreWriter.create(str(path), dim, dtype, encoder, extra,  # type: ignore[return-value]
                                            commit)

        check_store_dtype(dtype)
        root = Path(path)
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "dim": int(dim),
            "count": 0,
            "dtype": dtype,
            "normalized": True,
            "encoder": encoder or {},
            "pairkit_version": __version__,
            "created": _now(),
            "shards": [],
            "items": None,
            "errors": None,
        }
        manifest.update(extra or {})
        writer = cls(root, manifest, normalize_items(pd.DataFrame({"path": []})))
        writer._take_lock()
        try:
            writer._find_replaced()
            if commit:
                writer.commit()
        except BaseException:
            writer.close()
            raise
        return writer

    def _find_replaced(self) -> None:
        """A new store in a folder that holds another (``--force``): note the old store's
        files, removed at the first commit, and number the new shards past every shard
        file there, so no new file takes an old one's name."""
        if not self.root.is_dir():
            return
        numbers = [-1]
        for entry in self.root.iterdir():
            if entry.name == MANIFEST or entry.is_symlink() or not entry.is_file() \
                    or not is_ours(entry.name):
                continue
            self._replaced.add(entry.name)
            if m := SHARD_RE.match(entry.name):
                numbers.append(int(m.group("number")))
        self._number_base = max(numbers) + 1

    @classmethod
    def resume(cls, path: str | os.PathLike[str]) -> StoreWriter:
        """Reopen an existing store for appending (verifies it first).

        Under the lock: temp files and unreferenced shard/item files of killed writers
        are removed, and a format-1 store is upgraded to format 2 (its interrupted append,
        item rows the manifest never committed, is dropped). A URL: see :meth:`create`.
        """
        from pairkit.core.remote import is_url

        if is_url(path):
            from pairkit.core.remote_store import RemoteStoreWriter

            return RemoteStoreWriter.resume(str(path))  # type: ignore[return-value]
        root = Path(path)
        writer = cls(root, {}, None)  # type: ignore[arg-type]
        writer._take_lock()
        try:
            remove_stale_temps(root, is_ours)
            manifest = read_manifest(root)
            if manifest["format_version"] < 2:
                _repair_v1_items(root, manifest)
            else:
                _remove_unreferenced(root, manifest)
            store = Store.open(root, verify=True)
            writer.manifest = dict(store.manifest)
            writer._errors_committed = (store.manifest.get("errors") or {}).get("file")
            writer.items = store.items.copy()
            if store.format_version < 2:
                writer._upgrade(store)
        except BaseException:
            writer.close()
            raise
        return writer

    def _upgrade(self, store: Store) -> None:
        """Rewrite a format-1 store's manifest (and item table) as format 2."""
        shards, start = [], 0
        for s, arr in zip(store.shards, store.shard_arrays(), strict=True):
            size = os.stat(self.root / s.file).st_size
            shards.append({"file": s.file, "rows": s.rows, "sha256": s.sha256, "start": start,
                           "bytes": size})
            start += len(arr)
        self.manifest.update(format_version=FORMAT_VERSION, shards=shards, items=None,
                             errors=None)
        self._items_dirty = self.count > 0
        if (self.root / ERRORS).is_file():
            lines = (self.root / ERRORS).read_bytes().count(b"\n")
            self.manifest["errors"] = dict(_file_record(self.root / ERRORS), rows=lines)
        self.commit()

    def add_shard(self, vectors: np.ndarray, items: pd.DataFrame) -> None:
        """Write one shard: ``vectors`` (n, dim), normalised here; ``items`` n rows.
        Nothing is visible to readers until :meth:`commit`."""
        vectors = self.checked_vectors(vectors, items)
        if len(vectors) == 0:
            return
        record = write_shard(self.root, self.next_shard_name(), vectors, self.manifest["dtype"])
        self.add_written_shard(record, items)

    def add_written_shard(self, record: dict[str, Any], items: pd.DataFrame) -> None:
        super().add_written_shard(record, items)
        self._uncommitted.append(record["file"])

    def discard(self) -> None:
        """Remove the files written since the last commit (shards, an item table or error
        list of a commit that failed): a write that failed gives their space back now,
        not at the next writer. The writer is done with then."""
        for name in self._uncommitted:
            with contextlib.suppress(FileNotFoundError):
                (self.root / name).unlink()
        self._uncommitted = []

    def next_shard_name(self, offset: int = 0) -> str:
        """A shard name no committed shard has (:meth:`ShardBook.next_shard_number`), nor
        a shard of the store a new one replaces."""
        return SHARD_PATTERN.format(max(self.next_shard_number(offset),
                                        self._number_base + offset))

    def _shard_size(self, name: str) -> int:
        return os.stat(self.root / name).st_size

    def set_errors(self, errors: list[dict[str, Any]]) -> bool:
        """Set the error records (one JSON object per line), written with the next commit
        under a new name (``errors-TOKEN-NNNNN.jsonl``), never before and never over the
        file the committed manifest names: a run stopped before it commits leaves no
        error file without a manifest, and a reader of the last commit reads its own list.
        File names that are not valid UTF-8 are written with JSON surrogate escapes
        (``\\udcff``), so ``os.fsencode(json.loads(line)["path"])`` gives back the
        original bytes. Returns True when the record changed."""
        before = self.manifest.get("errors")
        if not errors:
            self._errors_data = None
            self._errors_dirty = True
            self.manifest["errors"] = None
            return before is not None
        data = "".join(json_line(e) + "\n" for e in errors).encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        if before and before.get("sha256") == digest and before.get("rows") == len(errors):
            return False
        self._errors_data = data
        self._errors_dirty = True
        self.manifest["errors"] = {"file": None, "bytes": len(data), "sha256": digest,
                                   "rows": len(errors)}  # named when written
        return True

    def _write_errors(self) -> None:
        """Write the error records :meth:`set_errors` set, under a name no file has, before
        the manifest that names them (the old file goes after that commit)."""
        if not self._errors_dirty:
            return
        if self._errors_data is not None:
            number = len(self.manifest["shards"])
            while (self.root / (name := f"errors-{self._token}-{number:05d}.jsonl")).exists():
                number += 1
            with atomic_open(self.root / name, "wb") as fh:
                fh.write(self._errors_data)
            self._uncommitted.append(name)
            self.manifest["errors"]["file"] = name
        self._errors_dirty = False

    def commit(self) -> None:
        """Make everything written so far visible: item table (new name), then manifest."""
        old_items = (self.manifest.get("items") or {}).get("file")
        if self._items_dirty:
            number = len(self.manifest["shards"])
            while (self.root / (name := ITEMS_PATTERN.format(number))).exists():
                number += 1  # the old table (the next name), or a replaced store's
            with atomic_path(self.root / name) as tmp:
                self.items.reset_index(drop=True).to_parquet(tmp, index=False)
                fsync_file(tmp)
                record = _file_record(tmp)
            self._uncommitted.append(name)
            self.manifest["items"] = dict(record, file=name, rows=self.count)
            self._items_dirty = False
        self._write_errors()
        self.manifest["updated"] = _now()
        with atomic_open(self.root / MANIFEST) as fh:
            self.manifest = dump_sealed(self.manifest, fh)
        self._uncommitted = []
        fsync_dir(self.root)
        new_items = (self.manifest.get("items") or {}).get("file")
        new_errors = (self.manifest.get("errors") or {}).get("file")
        old_errors, self._errors_committed = self._errors_committed, new_errors
        for old, new in ((old_items, new_items), (old_errors, new_errors)):
            if old and old != new:
                with contextlib.suppress(FileNotFoundError):
                    (self.root / old).unlink()  # readers pinned it or will retry
        if self.manifest["format_version"] >= 2:
            with contextlib.suppress(FileNotFoundError):
                (self.root / ITEMS).unlink()  # format 1's table, no longer named
        if self._replaced:
            self._remove_replaced()

    def _remove_replaced(self) -> None:
        """After the new store's first commit: remove the files of the store it replaced
        (readers holding them keep them open; one opening now retries) and that store's
        saved indexes."""
        named = {s["file"] for s in self.manifest["shards"]}
        named |= {(self.manifest.get(k) or {}).get("file") for k in ("items", "errors")}
        for name in sorted(self._replaced - named):
            with contextlib.suppress(FileNotFoundError):
                (self.root / name).unlink()
        self._replaced = set()
        if is_our_index_dir(self.root / INDEX_DIR):
            remove_index_dir(self.root / INDEX_DIR)


# rows normalised at a time when a shard is written: this many bytes of float32 at most
NORMALIZE_BLOCK_BYTES = 1 << 24


def normalized_blocks(vectors: np.ndarray, dtype: str) -> Iterator[np.ndarray]:
    """``vectors`` (n, dim) L2-normalised and cast to ``dtype``, in blocks of rows (at most
    :data:`NORMALIZE_BLOCK_BYTES` of float32 each), the same values as normalising the
    whole at once (each row on its own): memory one block, however large the shard."""
    rows = max(1, NORMALIZE_BLOCK_BYTES // (4 * max(1, vectors.shape[1])))
    for start in range(0, len(vectors), rows):
        yield l2_normalize(np.asarray(vectors[start:start + rows])).astype(dtype, copy=False)


def normalized(vectors: np.ndarray, dtype: str) -> np.ndarray:
    """``vectors`` (n, dim) L2-normalised as one ``dtype`` array, filled block by block
    (:func:`normalized_blocks`): memory the output and one block."""
    out = np.empty(vectors.shape, dtype)
    start = 0
    for block in normalized_blocks(vectors, dtype):
        out[start:start + len(block)] = block
        start += len(block)
    return out


def _non_finite(name: str, rows: int) -> PairkitError:
    # the embed loop names the images; a last guard
    return PairkitError(f"{name}: {rows} rows are non-finite (NaN or inf); the shard was "
                        "not written")


def write_shard(root: str | os.PathLike[str], name: str, vectors: np.ndarray,
                dtype: str) -> dict[str, Any]:
    """Write ``vectors`` (n, dim), L2-normalised, as ``dtype`` into ``root/name``
    atomically (temp file, fsync, rename). Returns ``{file, rows, bytes, sha256,
    blocks}`` (``blocks``: its block checksums, docs/formats.md). The
    file is invisible to readers until a writer adds it to the manifest. ``root`` may be
    a URL: the shard is put as an object (a Ray worker writing straight to storage).
    Normalised block by block (:func:`normalized_blocks`): a local shard is written as
    it goes (memory one block); an object is put whole (memory the shard in ``dtype``)."""
    from pairkit.core.remote import is_url

    vectors = np.asarray(vectors)
    bad = 0
    if is_url(root):
        from pairkit.core.remote_store import write_shard_object

        normed = normalized(vectors, dtype)
        bad = int((~np.isfinite(normed).all(axis=1)).sum())
        if bad:
            raise _non_finite(name, bad)
        return write_shard_object(str(root), name, normed)
    with atomic_path(Path(root) / name) as tmp:
        with open(tmp, "wb") as fh:
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                      "fortran_order": False, "shape": vectors.shape}
            try:  # the header np.save writes: version 1.0 unless it is too long
                np.lib.format.write_array_header_1_0(fh, header)
            except ValueError:
                fh.seek(0)
                fh.truncate()
                np.lib.format.write_array_header_2_0(fh, header)
            for block in normalized_blocks(vectors, dtype):
                bad += int((~np.isfinite(block).all(axis=1)).sum())
                fh.write(np.ascontiguousarray(block).data)
            if bad:
                raise _non_finite(name, bad)
            fh.flush()
            os.fsync(fh.fileno())
        with open(tmp, "rb") as fh:
            sums = shard_sums(fh, SHARD_BLOCK_BYTES)
    return {"file": name, "rows": len(vectors), **sums}


def _file_record(path: Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        digest = sha256_fd(fh)
        size = os.fstat(fh.fileno()).st_size
    return {"file": path.name, "bytes": size, "sha256": digest}


def json_line(record: dict[str, Any]) -> str:
    """One JSON line; text with surrogate escapes (undecodable file names) stays lossless."""
    line = json.dumps(record, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(record, ensure_ascii=True)
    return line


def _repair_v1_items(root: Path, manifest: dict[str, Any]) -> None:
    """A format-1 append interrupted between items.parquet and the manifest leaves item
    rows the manifest never committed: drop them (under the writer lock)."""
    import pandas as pd

    items_path = root / ITEMS
    if not items_path.is_file():
        return
    with open_regular(items_path, "item table") as fh:
        rows = parquet_rows(fh, items_path)
    if rows > manifest["count"]:
        items = pd.read_parquet(items_path).iloc[: manifest["count"]]
        with atomic_path(items_path) as tmp:
            items.reset_index(drop=True).to_parquet(tmp, index=False)


def write_store(
    path: str | os.PathLike[str],
    vectors: np.ndarray,
    items: pd.DataFrame,
    *,
    encoder: dict[str, Any] | None = None,
    dtype: str = "float16",
    force: bool = False,
    shard_rows: int = 1 << 20,
    extra: dict[str, Any] | None = None,
) -> Store:
    """Write a whole store in one go (import, project), committed once at the end.
    Holds the store's writer lock throughout. With ``force`` an old store there stays
    whole until that commit (:meth:`StoreWriter.create`): a write that fails or is
    interrupted (a full disk, Ctrl-C) leaves it as it was, its own shards removed.
    Returns the opened store."""
    with writer_lock(path, "store"):
        root = prepare_store_dir(path, force)
        with StoreWriter.create(root, vectors.shape[1], dtype, encoder, extra,
                                commit=False) as writer:
            try:
                for start in range(0, len(vectors), shard_rows):
                    stop = start + shard_rows
                    writer.add_shard(vectors[start:stop], items.iloc[start:stop])
                writer.commit()
            except BaseException:
                writer.discard()
                raise
        return Store.open(root, verify=False)
