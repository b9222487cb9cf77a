"""The store: one folder of embedding shards, an item table and a manifest.

Layout (see docs/formats.md)::

    STORE/manifest.json        written last; lists the committed shards
    STORE/items.parquet        one row per item, in embedding order
    STORE/embeddings-00000.npy float16/float32, rows L2-normalised
    STORE/errors.jsonl         files that could not be embedded (embed only)

Every file is written atomically (temp + rename). The manifest is the source
of truth: a shard file that it does not list is an interrupted write and is
ignored (and overwritten on resume).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit import __version__
from pairkit.core.atomic import atomic_open, atomic_path
from pairkit.errors import PairkitError, StoreError

if TYPE_CHECKING:
    import pandas as pd

FORMAT = "pairkit-store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ITEMS = "items.parquet"
ERRORS = "errors.jsonl"
SHARD_PATTERN = "embeddings-{:05d}.npy"
ITEM_COLUMNS = ("id", "path", "source", "view", "label", "file_sha256")
DTYPES = ("float16", "float32")
_STORE_FILES_PREFIXES = ("embeddings-", ".embeddings-", ".items.parquet", ".manifest.json")


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows divided by their L2 norm (float32, shape unchanged). Zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, eps)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Shard:
    file: str
    rows: int
    sha256: str


def normalize_items(items: pd.DataFrame, start_id: int = 0) -> pd.DataFrame:
    """Return ``items`` with the store's columns and dtypes, ids from ``start_id``.

    ``path`` is required; ``source`` defaults to ``path``, ``view`` to 0,
    ``label`` and ``file_sha256`` to null.
    """
    import pandas as pd

    if "path" not in items.columns:
        raise PairkitError("items need a 'path' column")
    n = len(items)
    out = pd.DataFrame(
        {
            "id": np.arange(start_id, start_id + n, dtype=np.int64),
            "path": items["path"].astype(str).to_numpy(),
        }
    )
    out["source"] = (
        items["source"].astype(str).to_numpy() if "source" in items.columns else out["path"]
    )
    if "view" in items.columns:
        views = pd.to_numeric(items["view"], errors="coerce")
        if views.isna().any():
            raise PairkitError("items column 'view' must hold integers")
        out["view"] = views.astype(np.int16).to_numpy()
    else:
        out["view"] = np.zeros(n, dtype=np.int16)
    for col in ("label", "file_sha256"):
        if col in items.columns:
            values = items[col].to_numpy(dtype=object)
            out[col] = pd.array(
                [None if _is_missing(v) else str(v) for v in values], dtype="string"
            )
        else:
            out[col] = pd.array([None] * n, dtype="string")
    return out


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        import pandas as pd

        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


class Store:
    """A read-only view of a store folder. Open with :meth:`Store.open`."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        self._items: pd.DataFrame | None = None
        self._vectors: np.ndarray | None = None

    # -- opening and validation -------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], verify: bool = True) -> Store:
        """Open and validate a store; raise :class:`StoreError` naming the problem.

        ``verify`` also checks every shard's sha256 (reads every byte once).
        """
        root = Path(path)
        if not root.exists():
            raise StoreError(f"store {root} not found")
        if not root.is_dir():
            raise StoreError(f"{root} is a file, not a store folder")
        manifest = read_manifest(root)
        store = cls(root, manifest)
        store._validate(verify)
        return store

    def _validate(self, verify: bool) -> None:
        m = self.manifest
        total = 0
        for shard in self.shards:
            f = self.root / shard.file
            if not f.is_file():
                raise StoreError(f"store {self.root}: shard {shard.file} is missing")
            try:
                arr = np.load(f, mmap_mode="r")
            except Exception as exc:
                raise StoreError(
                    f"store {self.root}: shard {shard.file} is unreadable ({exc})"
                ) from None
            if arr.ndim != 2 or arr.shape[1] != m["dim"] or arr.shape[0] != shard.rows:
                raise StoreError(
                    f"store {self.root}: shard {shard.file} has shape {tuple(arr.shape)}, "
                    f"manifest says ({shard.rows}, {m['dim']})"
                )
            if str(arr.dtype) != m["dtype"]:
                raise StoreError(
                    f"store {self.root}: shard {shard.file} is {arr.dtype}, manifest says "
                    f"{m['dtype']}"
                )
            if verify and sha256_file(f) != shard.sha256:
                raise StoreError(
                    f"store {self.root}: shard {shard.file} checksum mismatch (file changed "
                    "or damaged)"
                )
            total += shard.rows
        if total != m["count"]:
            raise StoreError(
                f"store {self.root}: shards hold {total} rows, manifest says {m['count']}"
            )
        items_path = self.root / ITEMS
        if m["count"] and not items_path.is_file():
            raise StoreError(f"store {self.root}: {ITEMS} is missing")
        if items_path.is_file():
            n_items = _parquet_rows(items_path)
            if n_items != m["count"]:
                raise StoreError(
                    f"store {self.root}: row count mismatch: {ITEMS} has {n_items} rows, "
                    f"manifest says {m['count']}"
                )

    # -- metadata ------------------------------------------------------------------
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
        return [Shard(**s) for s in self.manifest.get("shards", [])]

    @property
    def encoder(self) -> dict[str, Any]:
        return dict(self.manifest.get("encoder") or {})

    @property
    def content_id(self) -> str:
        """16 hex chars identifying the store's rows (its shards' checksums and count).

        Stable across manifest rewrites; pair tables carry it as ``store_id`` so a
        table is never applied to another store by mistake.
        """
        import hashlib as _h

        digest = _h.sha256(
            json.dumps([self.count, [s.sha256 for s in self.shards]]).encode()
        ).hexdigest()
        return digest[:16]

    @property
    def manifest_hash(self) -> str:
        """sha256 of manifest.json: identifies this exact store content."""
        return sha256_file(self.root / MANIFEST)

    # -- items ---------------------------------------------------------------------
    @property
    def items(self) -> pd.DataFrame:
        """The item table (id, path, source, view, label, file_sha256), one row per item."""
        if self._items is None:
            import pandas as pd

            if self.count == 0:
                self._items = normalize_items(pd.DataFrame({"path": []}))
            else:
                self._items = pd.read_parquet(self.root / ITEMS)
        return self._items

    @property
    def has_labels(self) -> bool:
        return bool(self.items["label"].notna().any()) if self.count else False

    def labels(self) -> np.ndarray | None:
        """Label of each item as an object array (None where missing), or None."""
        if not self.has_labels:
            return None
        return self.items["label"].to_numpy(dtype=object, na_value=None)

    def source_codes(self) -> np.ndarray:
        """int64 code per item; items with equal codes share a source. Shape (N,)."""
        import pandas as pd

        codes, _ = pd.factorize(self.items["source"])
        return codes.astype(np.int64)

    # -- vectors -------------------------------------------------------------------
    def shard_arrays(self) -> list[np.ndarray]:
        """Memory-mapped (read-only) arrays, one per shard, in row order."""
        return [np.load(self.root / s.file, mmap_mode="r") for s in self.shards]

    def vectors(self, dtype: str | np.dtype = np.float32) -> np.ndarray:
        """All embeddings as one C-contiguous array of shape (N, dim) in ``dtype``.

        Loads the store into memory (N * dim * itemsize bytes); cached.
        Use :meth:`iter_blocks` to stream instead.
        """
        dtype = np.dtype(dtype)
        if self._vectors is not None and self._vectors.dtype == dtype:
            return self._vectors
        out = np.empty((self.count, self.dim), dtype=dtype)
        start = 0
        for arr in self.shard_arrays():
            out[start : start + len(arr)] = arr
            start += len(arr)
        self._vectors = out
        return out

    def iter_blocks(
        self, rows: int = 65536, dtype: str | np.dtype = np.float32
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start_row, block)`` with blocks of at most ``rows`` rows, in order."""
        start = 0
        for arr in self.shard_arrays():
            for i in range(0, len(arr), rows):
                block = np.asarray(arr[i : i + rows], dtype=dtype)
                yield start + i, block
            start += len(arr)


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception as exc:
        raise StoreError(f"{path} is unreadable ({exc})") from exc


def read_manifest(root: Path) -> dict[str, Any]:
    """Load and check the manifest of the store at ``root``."""
    mpath = root / MANIFEST
    if not mpath.is_file():
        if any(root.glob("embeddings-*.npy")):
            raise StoreError(
                f"store {root} is half-written: no {MANIFEST} (rerun the command that made it)"
            )
        raise StoreError(f"{root} is not a pairkit store: no {MANIFEST}")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreError(f"store {root}: {MANIFEST} is unreadable ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StoreError(f"{root}/{MANIFEST} is not a pairkit store manifest")
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise StoreError(
            f"store {root} has format version {manifest.get('format_version')}; this pairkit "
            f"reads up to {FORMAT_VERSION}: upgrade pairkit"
        )
    for key in ("dim", "count", "dtype", "shards"):
        if key not in manifest:
            raise StoreError(f"store {root}: {MANIFEST} lacks '{key}'")
    return manifest


def is_store(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder with a pairkit manifest."""
    try:
        read_manifest(Path(path))
    except StoreError:
        return False
    return True


def prepare_store_dir(path: str | os.PathLike[str], force: bool) -> Path:
    """Check that ``path`` can receive a new store; clear an old store when ``force``.

    Refuses a path that is a file, a folder holding other files, or an existing
    store without ``force``. Only pairkit's own files are removed.
    """
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise PairkitError(f"output {root} is an existing file, expected a store folder")
    if root.is_dir():
        entries = list(root.iterdir())
        if entries:
            if not (root / MANIFEST).exists() and not any(
                e.name.startswith(_STORE_FILES_PREFIXES) for e in entries
            ):
                raise PairkitError(
                    f"output {root} is a folder that is not a pairkit store; choose another path"
                )
            if not force:
                raise PairkitError(f"store {root} exists; pass --force to replace it")
            clear_store(root)
    root.mkdir(parents=True, exist_ok=True)
    return root


def clear_store(root: Path) -> None:
    """Remove pairkit's files from a store folder (never other files)."""
    for entry in root.iterdir():
        name = entry.name
        if (
            name in (MANIFEST, ITEMS, ERRORS)
            or name.startswith(_STORE_FILES_PREFIXES)
            or (name.startswith(".") and name.endswith(".tmp"))
        ):
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


class StoreWriter:
    """Appends shards to a store; every append leaves a valid, smaller store.

    Order of an append: shard file (atomic), items.parquet (atomic), manifest (atomic).
    """

    def __init__(
        self,
        root: Path,
        manifest: dict[str, Any],
        items: pd.DataFrame,
    ) -> None:
        self.root = root
        self.manifest = manifest
        self.items = items

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dim: int,
        dtype: str = "float16",
        encoder: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> StoreWriter:
        """Start an empty store at ``path`` (the folder must be prepared by the caller)."""
        import pandas as pd

        if dtype not in DTYPES:
            raise PairkitError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype}")
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
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
        }
        manifest.update(extra or {})
        writer = cls(root, manifest, normalize_items(pd.DataFrame({"path": []})))
        writer._write_manifest()
        return writer

    @classmethod
    def resume(cls, path: str | os.PathLike[str]) -> StoreWriter:
        """Reopen an existing store for appending (validates it first).

        An append interrupted between its items.parquet and its manifest leaves item
        rows that the manifest never committed; they are dropped here.
        """
        import pandas as pd

        root = Path(path)
        manifest = read_manifest(root)
        items_path = root / ITEMS
        if items_path.is_file() and _parquet_rows(items_path) > manifest["count"]:
            items = pd.read_parquet(items_path).iloc[: manifest["count"]]
            with atomic_path(items_path) as tmp:
                items.reset_index(drop=True).to_parquet(tmp, index=False)
        store = Store.open(root, verify=True)
        return cls(store.root, dict(store.manifest), store.items.copy())

    @property
    def count(self) -> int:
        return int(self.manifest["count"])

    def append(self, vectors: np.ndarray, items: pd.DataFrame) -> None:
        """Commit one shard: ``vectors`` (n, dim), normalised here; ``items`` n rows."""
        import pandas as pd

        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.manifest["dim"]:
            raise PairkitError(
                f"vectors have shape {tuple(vectors.shape)}, store dim is {self.manifest['dim']}"
            )
        if len(items) != len(vectors):
            raise PairkitError(f"{len(items)} items for {len(vectors)} vectors")
        if len(vectors) == 0:
            return
        normed = l2_normalize(vectors).astype(self.manifest["dtype"])
        index = len(self.manifest["shards"])
        name = SHARD_PATTERN.format(index)
        with atomic_path(self.root / name) as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, normed)
                fh.flush()
                os.fsync(fh.fileno())
            digest = sha256_file(tmp)
        new_items = normalize_items(items, start_id=self.count)
        all_items = new_items if self.count == 0 else pd.concat(
            [self.items, new_items], ignore_index=True
        )
        with atomic_path(self.root / ITEMS) as tmp:
            all_items.to_parquet(tmp, index=False)
        self.items = all_items
        self.manifest["shards"].append({"file": name, "rows": len(normed), "sha256": digest})
        self.manifest["count"] = self.count + len(normed)
        self._write_manifest()

    def update(self, **fields: Any) -> None:
        """Set manifest fields and rewrite the manifest."""
        self.manifest.update(fields)
        self._write_manifest()

    def _write_manifest(self) -> None:
        self.manifest["updated"] = _now()
        with atomic_open(self.root / MANIFEST) as fh:
            json.dump(self.manifest, fh, indent=2, ensure_ascii=False)
            fh.write("\n")


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
    """Write a whole store in one go (import, project). Returns the opened store."""
    root = prepare_store_dir(path, force)
    writer = StoreWriter.create(root, vectors.shape[1], dtype, encoder, extra)
    for start in range(0, len(vectors), shard_rows):
        stop = start + shard_rows
        writer.append(vectors[start:stop], items.iloc[start:stop])
    return Store.open(root, verify=False)
