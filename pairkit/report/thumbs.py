"""Thumbnails for the report: only files under the image root, decoded safely.

A path from a store or a table is joined to the image root and resolved
(symlinks followed); anything that resolves outside the root, is not a regular
file, or can't be decoded gets no thumbnail but a reason the page shows in a
placeholder. Decoding goes through :func:`pairkit.encode.images.decode_image`,
so PIL's decompression-bomb guard stays on. Thumbnail files are named by a hash
of the resolved path: no name from the data reaches the file system. An item inside a
container file (a webdataset tar member ``SHARD.tar/MEMBER``, a Hugging Face dataset row
``FILE.arrow/ROW``) resolves to the container's real path joined with the rest, and is
read from the container (:mod:`pairkit.encode.item_images`); a row of a dataset store
embedded with ``--image-column`` from that column (:class:`ColumnRow`).

A row that is an augmented view (view >= 1) of a store made by ``embed`` is shown as that
view, rendered as embed rendered it (:mod:`pairkit.encode.views`: the same decode, crop,
flip and colour, drawn from the same seed) at thumbnail size, so an anchor and its positive,
two views of one file, look as the encoder saw them instead of the same picture twice.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

THUMB_DIR = "t"
THUMB_SUFFIX = ".jpg"
MAX_FILE_BYTES = 256 << 20  # larger files are not opened for a thumbnail
CONTAINER_SUFFIXES = (".tar", ".arrow", ".parquet")


@dataclass(frozen=True)
class ViewRecipe:
    """How a store's augmented views were rendered: embed's ``seed`` and the encoder's input
    ``size`` and ``interpolation`` (manifest ``seed``, ``encoder.preprocess``)."""

    seed: int
    size: int
    interpolation: str


@dataclass(frozen=True)
class ColumnRow:
    """The item ``real`` of a dataset store embedded with ``embed --image-column column``
    (:func:`pairkit.encode.item_images.image_column_of`): a row's image is read from that
    column, not the default pick."""

    real: Path
    column: str


@dataclass(frozen=True)
class ViewOf:
    """View ``view`` (>= 1) of the file ``real``, whose store ``source`` seeds its edits."""

    real: Path | ColumnRow
    source: str
    view: int
    recipe: ViewRecipe


def view_recipe(manifest: dict) -> ViewRecipe | None:
    """The recipe of a store made by embed with augmented views, else None (import, one
    view, a manifest without the encoder's preprocessing)."""
    embedding = manifest.get("embedding")
    pre = (manifest.get("encoder") or {}).get("preprocess") or {}
    if not isinstance(embedding, dict) or int(manifest.get("views") or 1) < 2:
        return None
    try:
        return ViewRecipe(int(manifest.get("seed") or 0), int(pre["size"]),
                          str(pre.get("interpolation", "bicubic")))
    except (KeyError, TypeError, ValueError):
        return None


def view_image(data: bytes, spec: ViewOf, size: int) -> Image.Image:
    """The view ``spec`` of the image in ``data`` as ``size`` x ``size`` RGB: decoded at
    embed's draft size (twice the encoder's input, :class:`pairkit.encode.batches.SourceDataset`)
    and edited with the random choices of :func:`pairkit.encode.views.view_rng`."""
    from pairkit.encode.images import decode_image
    from pairkit.encode.registry import Preprocess
    from pairkit.encode.views import augmented_view, view_rng

    img = decode_image(data, draft_size=2 * spec.recipe.size)
    pre = Preprocess(size=size, interpolation=spec.recipe.interpolation)
    return augmented_view(img, pre, view_rng(spec.recipe.seed, spec.source, spec.view))


@dataclass(frozen=True)
class Thumb:
    """``file`` (relative to the report folder) or ``problem`` (why there is none)."""

    file: str | None
    problem: str | None


def resolve_under(root: Path, rel: str) -> tuple[Path | None, str | None]:
    """``(real_path, None)`` for a file under ``root`` (already resolved), else
    ``(None, reason)``. Absolute paths, ``..`` and symlinks that leave ``root`` are
    refused."""
    if not rel:
        return None, "no path"
    if rel.startswith(("/", "\\")) or Path(rel).is_absolute() or _drive(rel):
        return None, "absolute path refused (outside the image root)"
    try:
        real = (root / rel).resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):  # a component is a file: a container?
        return _in_container(root, rel)
    except (OSError, RuntimeError, ValueError) as exc:  # loops, NUL bytes, permissions
        return None, f"unreadable path ({type(exc).__name__})"
    if not real.is_relative_to(root):
        return None, "outside the image root (refused)"
    if not real.is_file():
        return None, "not a file"
    return real, None


def _drive(rel: str) -> bool:
    """Whether ``rel`` starts with a Windows drive (``C:/``, ``C:\\``, ``C:``); a name like
    ``e:1/a.png`` (a folder ``e:1``) does not."""
    return (len(rel) >= 2 and rel[0].isascii() and rel[0].isalpha() and rel[1] == ":"
            and rel[2:3] in ("", "/", "\\"))


def _in_container(root: Path, rel: str) -> tuple[Path | None, str | None]:
    """``(real container / rest, None)`` when a prefix of ``rel`` is a container file under
    ``root`` (tar shard, Arrow or parquet file), else ``(None, "file not found")``."""
    parts = rel.replace("\\", "/").split("/")
    if ".." in parts:
        return None, "outside the image root (refused)"
    for i in range(len(parts) - 1, 0, -1):
        head = root.joinpath(*parts[:i])
        if head.suffix.lower() in CONTAINER_SUFFIXES and head.is_file():
            real = head.resolve()
            if not real.is_relative_to(root):
                return None, "outside the image root (refused)"
            return real.joinpath(*parts[i:]), None
    return None, "file not found"


def _container_of(src: Path) -> Path | None:
    """The container file ``src`` lies inside (see :func:`_in_container`), or None."""
    for parent in src.parents:
        if parent.suffix.lower() in CONTAINER_SUFFIXES and parent.is_file():
            return parent
    return None


def _path_key(real: Path | ColumnRow) -> bytes:
    if isinstance(real, ColumnRow):
        return os.fsencode(real.real) + b"\0" + real.column.encode(errors="surrogateescape")
    return os.fsencode(real)


def thumb_name(real: Path | ColumnRow | ViewOf) -> str:
    """Report-relative file name of the thumbnail of ``real`` (a file, or a view of one)."""
    key = _path_key(real) if not isinstance(real, ViewOf) else b"\0".join(
        (_path_key(real.real), real.source.encode(errors="surrogateescape"),
         repr((real.view, real.recipe)).encode()))
    digest = hashlib.sha256(key).hexdigest()[:24]
    return f"{THUMB_DIR}/{digest}{THUMB_SUFFIX}"


def make_thumbnail(src: Path | ColumnRow | ViewOf, dst: Path, size: int) -> str | None:
    """Write a JPEG thumbnail (longest side <= ``size``) of ``src`` to ``dst``; of a
    :class:`ViewOf`, the view (:func:`view_image`, ``size`` x ``size``).

    Returns None on success, else the reason it could not (nothing is written).
    """
    from PIL import Image

    from pairkit.encode.images import DecodeError, decode_image, read_bytes
    from pairkit.errors import PairkitError

    view = src if isinstance(src, ViewOf) else None
    src = src.real if isinstance(src, ViewOf) else src
    column = src.column if isinstance(src, ColumnRow) else None
    src = src.real if isinstance(src, ColumnRow) else src

    try:
        container = None if src.is_file() else _container_of(src)
        if container is not None:
            from pairkit.encode.item_images import read_item_bytes

            rel = src.relative_to(container.parent).as_posix()
            data = read_item_bytes(container.parent, rel, MAX_FILE_BYTES, column)
        elif src.stat().st_size > MAX_FILE_BYTES:
            return f"file larger than {MAX_FILE_BYTES >> 20} MB"
        else:
            data = read_bytes(src)
        img = view_image(data, view, size) if view else decode_image(data, draft_size=size)
    except (DecodeError, PairkitError) as exc:
        return str(exc)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    except Exception as exc:  # a hostile file must cost its thumbnail, never the report
        return f"can't decode ({type(exc).__name__})"
    img.thumbnail((size, size), Image.Resampling.BILINEAR, reducing_gap=2.0)
    img.save(dst, "JPEG", quality=75, optimize=True)
    return None


def make_thumbnails(files: Iterable[Path | ColumnRow | ViewOf], out_dir: Path, size: int,
                    workers: int | None = None, progress: Callable[[int], None] | None = None,
                    on_start: Callable[[int], None] | None = None
                    ) -> dict[Path | ColumnRow | ViewOf, Thumb]:
    """Thumbnails of resolved ``files`` (or views of them) under ``out_dir/t/``; returns
    file -> Thumb.

    Decoding and encoding run in a thread pool (PIL releases the GIL while it works).
    ``on_start(files)`` once (distinct files), then ``progress(1)`` per file done, in
    this thread.
    """
    todo = sorted(set(files), key=lambda f: (str(f), 0) if not isinstance(f, ViewOf)
                  else (str(f.real), f.view))
    (out_dir / THUMB_DIR).mkdir(parents=True, exist_ok=True)
    workers = workers or min(8, os.cpu_count() or 1)

    def one(real: Path | ColumnRow | ViewOf) -> Thumb:
        name = thumb_name(real)
        problem = make_thumbnail(real, out_dir / name, size)
        return Thumb(None, problem) if problem else Thumb(name, None)

    def counted(made: Iterable[Thumb]) -> Iterator[Thumb]:
        for thumb in made:
            if progress is not None:
                progress(1)
            yield thumb

    if on_start is not None:
        on_start(len(todo))
    if workers <= 1 or len(todo) < 8:
        return dict(zip(todo, counted(map(one, todo)), strict=True))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(todo, counted(pool.map(one, todo)), strict=True))
