"""An item's image back from its store path and the store's image root: a plain file, a
member of a webdataset tar shard (``SHARD.tar/MEMBER``) or a row of a Hugging Face data
file (``FILE.arrow/ROW``), never a path outside the image root."""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from pairkit.encode.images import DEFAULT_MAX_FILE_BYTES, DecodeError, decode_image
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    from PIL import Image


@lru_cache(maxsize=16)
def _tar_members(tar: str, rel: str) -> dict[str, tuple[int, int]]:
    from pairkit.encode.webdataset import list_members

    files, _, _ = list_members(Path(tar), rel)
    return {f.path: f.member for f in files if f.member is not None}


def read_item_bytes(image_root: str | Path, path: str,
                    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
                    image_column: str | None = None) -> bytes:
    """The bytes of the item ``path`` under ``image_root``. PairkitError for a path that
    would leave the image root (absolute, ``..``) and for one that can't be read (the
    reason named). ``image_column``: a dataset store's ``embed --image-column``
    (:func:`image_column_of`)."""
    try:
        return _read_item_bytes(image_root, path, max_bytes, image_column)
    except DecodeError as exc:
        raise PairkitError(f"image {path!a} under {image_root}: {exc}") from None


def item_image(image_root: str | Path, path: str,
               max_bytes: int = DEFAULT_MAX_FILE_BYTES,
               image_column: str | None = None) -> tuple[Path | io.BytesIO, int] | None:
    """The item ``path``'s image as something PIL opens, and its size in bytes: a plain
    file under ``image_root`` as its :class:`~pathlib.Path` (nothing read: a reader of its
    header reads only that) and the file's size; a tar member or a dataset row
    (:func:`read_item_bytes`, at most ``max_bytes``) as an :class:`io.BytesIO` of its bytes
    and their count. None for a path that would leave the image root (never opened) and for
    an item that can't be read (missing, too large, no such member, row or column)."""
    from pairkit.core.paths import resolve_item_path

    f = resolve_item_path(image_root, path)
    if f is None:
        return None
    try:
        if f.is_file():
            return f, f.stat().st_size
        data = read_item_bytes(image_root, path, max_bytes, image_column)
    except (PairkitError, DecodeError, OSError, ValueError):
        return None
    return io.BytesIO(data), len(data)


def load_item_source(source: Path | io.BytesIO, draft_size: int | None = None,
                     max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Image.Image:
    """An :func:`item_image` source decoded by ``embed``'s decoder (8-bit RGB, the bomb
    guard): a file read with the ``max_bytes`` cap, bytes in memory as they are (read
    under it); DecodeError with the reason."""
    from pairkit.encode.images import load_image

    if isinstance(source, io.BytesIO):
        return decode_image(source.getvalue(), draft_size)
    return load_image(source, draft_size, max_bytes)[0]


def image_column_of(store: object) -> str | None:
    """The image column a dataset store was embedded from (None: the default pick); a
    projected store's is its input's (``projected.image_column``)."""
    manifest = getattr(store, "manifest", {})
    ident = manifest.get("embedding") or manifest.get("projected") or {}
    return ident.get("image_column") if isinstance(ident, dict) else None


def _read_item_bytes(image_root: str | Path, path: str, max_bytes: int,
                     image_column: str | None) -> bytes:
    from pairkit.core.paths import path_problem
    from pairkit.encode.images import read_bytes

    problem = path_problem(path)
    if problem is not None:
        raise PairkitError(f"item path {path!a} {problem}: not opened")
    root = Path(image_root)
    full = root / path
    if full.is_file():
        return read_bytes(full, max_bytes)
    parts = path.split("/")
    for i in range(len(parts) - 1, 0, -1):  # the longest prefix that is a file
        head = root.joinpath(*parts[:i])
        if not head.is_file():
            continue
        rel = "/".join(parts[:i])
        if head.suffix.lower() == ".tar":
            from pairkit.encode.webdataset import read_member

            member = _tar_members(str(head), rel).get(path)
            if member is None:
                raise DecodeError(f"no member {path[len(rel) + 1:]!a} in {rel}")
            return read_member(head, member[0], member[1], max_bytes)
        from pairkit.encode.hf_datasets import open_row

        data = open_row(root, path, max_bytes, image_column)
        if data is not None:
            return data
        break
    raise DecodeError(f"image {full} not found")


def load_item_image(image_root: str | Path, path: str,
                    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
                    image_column: str | None = None) -> Image.Image:
    """:func:`read_item_bytes`, decoded to 8-bit RGB with the bomb guard."""
    data = read_item_bytes(image_root, path, max_bytes, image_column)
    try:
        return decode_image(data)
    except DecodeError as exc:
        raise PairkitError(f"image {path!a} under {image_root}: {exc}") from None
