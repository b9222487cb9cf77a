"""Saved indices: ``STORE/index/<kind>.faiss`` beside ``<kind>.json``.

The JSON records the store ``content_id`` the index was built for and the sha256 and
size of the ``.faiss`` file (the JSON is sealed with its own checksum). :func:`load_index`
ignores (returns None for) an index built for other rows or by an older pairkit (no
checksum), and refuses one whose bytes don't match: nothing unverified reaches
``faiss.read_index``. Saving holds the store's writer lock.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np

from pairkit.core.atomic import atomic_open, atomic_path, remove_stale_temps
from pairkit.core.integrity import dump_sealed, read_json_file, seal_ok, sha256_fd
from pairkit.core.lock import writer_lock
from pairkit.core.store import INDEX_DIR
from pairkit.errors import PairkitError
from pairkit.index.faiss_build import build_index, is_cpu
from pairkit.index.options import IndexOptions

MAX_META_BYTES = 1 << 20


def index_paths(store_root: str | os.PathLike[str], kind: str) -> tuple[Path, Path]:
    """``(STORE/index/<kind>.faiss, STORE/index/<kind>.json)``."""
    folder = Path(store_root) / INDEX_DIR
    return folder / f"{kind}.faiss", folder / f"{kind}.json"


def save_index(
    index: Any, spec: IndexOptions, store_root: str | os.PathLike[str], content_id: str,
    count: int, dim: int, force: bool = False,
) -> Path:
    """Write a CPU ``index`` and its description atomically under ``STORE/index/``.

    Holds the store's writer lock. Refuses to replace an index built for the same rows
    unless ``force``. Returns the path of the ``.faiss`` file.
    """
    import faiss

    with writer_lock(store_root, "store"):
        fpath = check_saved(store_root, spec.kind, content_id, force)
        _, jpath = index_paths(store_root, spec.kind)
        try:
            fpath.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise PairkitError(f"store {store_root} holds a file named index where pairkit "
                               "keeps its saved indexes: move it away") from None
        remove_stale_temps(fpath.parent, lambda name: name.endswith((".faiss", ".json")))
        if not is_cpu(index):
            index = faiss.index_gpu_to_cpu(index)
        # the old description goes before the new bytes take its file's name: a kill in
        # between leaves no saved index (rebuilt), never a description of other bytes
        jpath.unlink(missing_ok=True)
        with atomic_path(fpath) as tmp:
            faiss.write_index(index, str(tmp))
            with open(tmp, "rb") as fh:
                digest = sha256_fd(fh)
                size = os.fstat(fh.fileno()).st_size
                os.fsync(fh.fileno())
        meta = {
            "format": "pairkit-index",
            "kind": spec.kind,
            "spec": spec.build_fields(),
            "content_id": content_id,
            "count": int(count),
            "dim": int(dim),
            "metric": "inner_product",
            "faiss_version": faiss.__version__,
            "file": fpath.name,
            "bytes": size,
            "sha256": digest,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        with atomic_open(jpath) as fh:
            dump_sealed(meta, fh)
    return fpath


def build_and_save(vectors: np.ndarray, spec: IndexOptions, store_root: str | os.PathLike[str],
                   content_id: str, force: bool = False, **hooks: Any) -> Path:
    """Build ``spec`` (resolved) over ``vectors`` (N, d) and save it under the store,
    holding the store's writer lock from the check to the save. Returns the .faiss path.
    ``hooks``: :func:`~pairkit.index.faiss_build.build_index`'s progress hook (progress,
    on_start, on_phase)."""
    with writer_lock(store_root, "store"):
        check_saved(store_root, spec.kind, content_id, force)
        built = build_index(vectors, spec, **hooks)
        return save_index(built, spec, store_root, content_id, len(vectors), vectors.shape[1],
                          force=force)


def check_saved(store_root: str | os.PathLike[str], kind: str, content_id: str,
                force: bool) -> Path:
    """Refuse (one-line error) to replace a saved ``kind`` index built for these rows
    unless ``force``; an index of other rows is stale and may be replaced. Returns its path."""
    fpath, jpath = index_paths(store_root, kind)
    if fpath.exists() and not force:
        meta = read_index_meta(jpath)
        if meta is not None and meta.get("content_id") == content_id:
            raise PairkitError(f"index {fpath} exists; pass --force to rebuild it")
    return fpath


def saved_spec(store_root: str | os.PathLike[str], kind: str,
               content_id: str) -> IndexOptions | None:
    """The spec of the saved ``kind`` index when it was built for these rows, else None."""
    fpath, jpath = index_paths(store_root, kind)
    meta = read_index_meta(jpath)
    if meta is None or not fpath.is_file() or meta.get("content_id") != content_id:
        return None
    verify_bytes(fpath, meta)
    return IndexOptions.from_build_fields(meta.get("spec"))


def verify_bytes(fpath: Path, meta: dict[str, Any]) -> None:
    """PairkitError unless ``fpath``'s size and sha256 are those ``meta`` records."""
    try:
        with open(fpath, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            ok = size == meta.get("bytes") and sha256_fd(fh) == meta.get("sha256")
    except OSError as exc:
        raise PairkitError(f"saved index {fpath} is unreadable ({exc.strerror}); rebuild it "
                           "with pairkit index --force") from None
    if not ok:
        raise PairkitError(f"saved index {fpath} does not match its checksum (damaged or "
                           "replaced): rebuild it with pairkit index --force")


def read_index_meta(jpath: Path) -> dict[str, Any] | None:
    """The JSON description of a saved index, or None when missing, unreadable or not
    sealed by pairkit (damaged, edited, or written by an older version)."""
    try:
        meta = read_json_file(jpath, MAX_META_BYTES, "index description")
    except (OSError, PairkitError):
        return None
    return meta if isinstance(meta, dict) and seal_ok(meta) else None


def load_index(
    store_root: str | os.PathLike[str], kind: str, content_id: str, count: int
) -> tuple[Any, IndexOptions] | None:
    """Load ``STORE/index/<kind>.faiss`` if it was built for these rows, else None.

    An index whose recorded ``content_id`` or row count differs from the store's
    (the store was rebuilt), or whose description is unsealed (older pairkit, damaged),
    is never used. The file's size and sha256 are checked against the description
    before ``faiss.read_index`` sees it; a mismatch is an error.
    """
    import faiss

    fpath, jpath = index_paths(store_root, kind)
    meta = read_index_meta(jpath)
    if meta is None or not fpath.is_file():
        return None
    if meta.get("content_id") != content_id or meta.get("count") != count:
        return None
    verify_bytes(fpath, meta)
    try:
        index = faiss.read_index(str(fpath))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise PairkitError(f"saved index {fpath} is unreadable ({first}); rebuild it") from None
    if index.ntotal != count:
        return None
    spec = IndexOptions.from_build_fields(meta.get("spec"))
    return None if spec is None else (index, spec)
