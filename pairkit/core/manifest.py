"""The store manifest: reading it safely and checking every field before use.

The manifest is the store's single commit point: it names every file a reader may
open (shards with their row ranges, the item table, errors.jsonl) with its size and
sha256, and it carries the sha256 of its own canonical form (``self_sha256``, see
integrity.py), so a flipped bit anywhere in the store is refused. It is read with a
size cap, from regular files only, and every field is type-checked, so a damaged or
hostile manifest gives one line naming the field, never a traceback.

Format 1 (older pairkit: a fixed ``items.parquet``, no item checksum, no row ranges)
is still read; a writer upgrades it to format 2 on its first write.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pairkit.core.integrity import SEAL_KEY, block_digests, read_regular_file, seal_ok
from pairkit.errors import PairkitError, StoreError

FORMAT = "pairkit-store"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
ITEMS = "items.parquet"  # format 1's item table; format 2 names a versioned file
ITEMS_PATTERN = "items-{:05d}.parquet"
ERRORS = "errors.jsonl"
SHARD_PATTERN = "embeddings-{:05d}.npy"
# object storage (no rename): a writer's objects carry its token, so two writers never
# write the same name (core/remote_store.py)
SHARD_RE = re.compile(r"^embeddings-(?P<number>\d{5,})(?:-[0-9a-f]{8})?\.npy$")
ITEMS_RE = re.compile(r"^items-\d{5,}(?:-[0-9a-f]{8})?\.parquet$")
ERRORS_RE = re.compile(r"^errors(?:-[0-9a-f]{8}-\d{5,})?\.jsonl$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
DTYPES = ("float16", "float32")


def check_store_dtype(dtype: str) -> None:
    """UsageError for a store dtype that is not one of :data:`DTYPES` (``--dtype`` of
    import, project and the store writers, refused before any reading)."""
    if dtype not in DTYPES:
        from pairkit.errors import UsageError

        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype}")
# 64 MiB holds the entries of ~300,000 shards; anything larger is not a pairkit manifest
MAX_MANIFEST_BYTES = 64 << 20
# a shard's block checksums (``blocks``): the sha256 of each piece of this many bytes of
# its file, what a ranged read verifies (pairkit.core.ranged_shard; docs/formats.md)
SHARD_BLOCK_BYTES = 1 << 20


def read_manifest_bytes(root: Path) -> bytes:
    """The raw bytes of ``root/manifest.json`` (capped, regular file only)."""
    mpath = root / MANIFEST
    try:
        return read_regular_file(mpath, MAX_MANIFEST_BYTES, "store manifest")
    except FileNotFoundError:
        from pairkit.core.lock import writer_holder

        holder = writer_holder(root) if root.is_dir() else None
        if holder is not None:  # an import or embed in progress: nothing committed yet
            raise StoreError(f"store {root} is being written by {holder}: no {MANIFEST} "
                             "yet (wait for it to finish)") from None
        if any(root.glob("embeddings-*.npy")):
            raise StoreError(
                f"store {root} is half-written: no {MANIFEST} (rerun the command that made it)"
            ) from None
        raise StoreError(f"{root} is not a pairkit store: no {MANIFEST}") from None
    except IsADirectoryError:
        raise StoreError(f"{root} is not a pairkit store: {MANIFEST} is a folder") from None
    except PairkitError as exc:
        raise StoreError(str(exc)) from None
    except OSError as exc:
        raise StoreError(f"store {root}: {MANIFEST} is unreadable ({exc.strerror})") from None


def parse_manifest(root: Path, raw: bytes) -> dict[str, Any]:
    """Decode and check manifest bytes; StoreError naming the first problem."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise StoreError(f"store {root}: {MANIFEST} is nested too deeply (damaged)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        first = str(exc).splitlines()[0][:120]
        raise StoreError(f"store {root}: {MANIFEST} is unreadable ({first})") from None
    check_manifest(root, manifest)
    return manifest


def read_manifest(root: str | Path) -> dict[str, Any]:
    """Load and check the manifest of the store at ``root`` (a folder or a URL)."""
    from pairkit.core.remote import is_url, location

    if is_url(root):
        from pairkit.core.remote_store import read_remote_manifest

        return read_remote_manifest(str(root))
    root = Path(location(root))
    return parse_manifest(root, read_manifest_bytes(root))


def has_manifest(root: str | Path) -> bool:
    """True when the folder (or object prefix, for a URL) holds a manifest."""
    from pairkit.core.remote import exists, is_url, join

    if is_url(root):
        return exists(join(str(root), MANIFEST))
    return (Path(root) / MANIFEST).exists()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bad(root: Path, what: str, expected: str, value: Any) -> StoreError:
    shown = json.dumps(value)[:60] if _jsonable(value) else type(value).__name__
    return StoreError(f"store {root}: {MANIFEST} field {what} must be {expected}, got {shown}")


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _int(root: Path, doc: dict[str, Any], key: str, where: str, minimum: int) -> int:
    value = doc.get(key)
    if not _is_int(value) or value < minimum:
        raise _bad(root, f"{where}'{key}'", f"an integer >= {minimum}", value)
    return value


def _file_record(root: Path, rec: Any, where: str, name_ok: Any, rows: int | None) -> None:
    if not isinstance(rec, dict):
        raise _bad(root, where, "an object", rec)
    name = rec.get("file")
    if not isinstance(name, str) or not name_ok(name):
        raise _bad(root, f"{where}.file", "a pairkit file name in the store folder", name)
    if not isinstance(rec.get("sha256"), str) or not SHA_RE.match(rec["sha256"]):
        raise _bad(root, f"{where}.sha256", "64 hex digits", rec.get("sha256"))
    _int(root, rec, "bytes", f"{where}.", 0)
    got = _int(root, rec, "rows", f"{where}.", 0)
    if rows is not None and got != rows:
        raise StoreError(f"store {root}: row count mismatch: {where} has {got} rows, "
                         f"manifest says {rows}")


def _blocks(root: Path, rec: Any, where: str, size: int) -> None:
    """A shard's ``blocks``: ``{"bytes": B, "sha256_base64": the sha256 digests of each B
    bytes of the file, concatenated, in base64}`` (integrity.shard_sums)."""
    if not isinstance(rec, dict):
        raise _bad(root, where, "an object", rec)
    block = _int(root, rec, "bytes", f"{where}.", 1)
    digests = block_digests(rec.get("sha256_base64"))
    want = -(-size // block)
    if digests is None or len(digests) != 32 * want:
        raise _bad(root, f"{where}.sha256_base64", f"the base64 of {want} sha256 digests",
                   rec.get("sha256_base64"))


def check_manifest(root: Path, m: Any) -> None:
    """Raise StoreError unless ``m`` is a well-formed manifest of format 1 or 2."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise StoreError(f"{root}/{MANIFEST} is not a pairkit store manifest")
    version = m.get("format_version")
    if not _is_int(version) or version < 1:
        raise _bad(root, "'format_version'", "1 or 2", version)
    if version > FORMAT_VERSION:
        raise StoreError(f"store {root} has format version {version}; this pairkit reads up "
                         f"to {FORMAT_VERSION}: upgrade pairkit")
    if (version >= 2 or SEAL_KEY in m) and not seal_ok(m):
        raise StoreError(f"store {root}: {MANIFEST} checksum mismatch (damaged or edited by "
                         "hand)")
    for key in ("dim", "count", "dtype", "shards"):
        if key not in m:
            raise StoreError(f"store {root}: {MANIFEST} lacks '{key}'")
    _int(root, m, "dim", "", 1)
    count = _int(root, m, "count", "", 0)
    if m["dtype"] not in DTYPES:
        raise _bad(root, "'dtype'", " or ".join(DTYPES), m["dtype"])
    if not isinstance(m["shards"], list):
        raise _bad(root, "'shards'", "a list", m["shards"])
    for key, kind in (("encoder", dict), ("image_root", str)):
        if m.get(key) is not None and not isinstance(m[key], kind):
            raise _bad(root, f"'{key}'", "an object" if kind is dict else "text", m[key])
    start = 0
    for i, s in enumerate(m["shards"]):
        where = f"shards[{i}]"
        if not isinstance(s, dict):
            raise _bad(root, where, "an object", s)
        if not isinstance(s.get("file"), str) or not SHARD_RE.match(s["file"]):
            raise _bad(root, f"{where}.file", "embeddings-NNNNN.npy", s.get("file"))
        rows = _int(root, s, "rows", f"{where}.", 0)
        if not isinstance(s.get("sha256"), str) or not SHA_RE.match(s["sha256"]):
            raise _bad(root, f"{where}.sha256", "64 hex digits", s.get("sha256"))
        if version >= 2:
            size = _int(root, s, "bytes", f"{where}.", 0)
            if s.get("blocks") is not None:
                _blocks(root, s["blocks"], f"{where}.blocks", size)
            if s.get("start") != start:
                raise StoreError(
                    f"store {root}: shard {s['file']} says it starts at row {s.get('start')}, "
                    f"but it is listed where row {start} starts (shards out of order)")
        start += rows
    if start != count:
        raise StoreError(f"store {root}: shards hold {start} rows, manifest says {count}")
    if version >= 2:
        if m.get("items") is None:
            if count:
                raise StoreError(f"store {root}: {MANIFEST} names no item table for {count} "
                                 "rows")
        else:
            _file_record(root, m["items"], "items", ITEMS_RE.match, count)
        if m.get("errors") is not None:
            _file_record(root, m["errors"], "errors", ERRORS_RE.match, None)


def errors_file(store: str | Path) -> str:
    """The name of the error list a local store's manifest names (a versioned name:
    docs/formats.md; :data:`ERRORS` in older stores or when the manifest can't be read):
    what embed's summary points the user to."""
    try:
        return (read_manifest(store).get("errors") or {}).get("file") or ERRORS
    except PairkitError:
        return ERRORS
