"""Finding image files and decoding them safely.

Decoding never trusts the file: PIL's decompression-bomb limit stays on (its
warning is raised as an error, so a bomb is refused before its pixels are
allocated), EXIF rotation is applied, and every mode (CMYK, 16-bit, palette
with transparency, grey+alpha) becomes 8-bit RGB.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pairkit.core.integrity import read_checked
from pairkit.core.paths import path_problem
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    from PIL import Image

# Larger than any photo or scan pairkit can decode under PIL's pixel limit (about
# 179 megapixels): a bigger file is refused before it is read (embed --max-file-bytes).
DEFAULT_MAX_FILE_BYTES = 256 << 20

# The file extensions of the raster formats this Pillow decodes (Image.registered_extensions
# names each; tests/encode/test_images.py saves and decodes one of every kind). A file with
# another extension is not an image to embed; a listed one that does not decode is in
# errors.jsonl with the reason.
IMAGE_EXTENSIONS = frozenset({
    ".jpg", ".jpeg", ".jpe", ".jfif",  # JPEG
    ".png", ".apng", ".gif", ".webp", ".bmp", ".dib", ".tif", ".tiff",
    ".ppm", ".pgm", ".pbm", ".pnm",  # Netpbm
    ".avif",
    ".jp2", ".j2k", ".jpx", ".jpf", ".jpc", ".j2c",  # JPEG 2000
    ".tga", ".ico", ".qoi", ".pcx",
})


class DecodeError(Exception):
    """A file that can't be embedded; ``str(exc)`` is the reason recorded in errors.jsonl."""


@dataclass(frozen=True)
class ImageFile:
    path: str  # relative to the image root, '/'-separated
    abs_path: Path  # the file, or the tar file that holds it (``member``)
    member: tuple[int, int] | None = None  # a tar member: (offset of its data, size)
    row: tuple[int, str] | None = None  # a dataset row: (row, image column) of abs_path


def discover_images(root: str | os.PathLike[str]) -> tuple[list[ImageFile], list[tuple[str, str]]]:
    """All image files under ``root`` (recursive, symlinks followed once; a file reached by
    several paths listed once), sorted by path.

    Returns ``(images, problems)``; ``problems`` lists ``(path, reason)`` for
    folders that could not be read, symlink loops, file names that are not valid
    UTF-8 (kept with Python's surrogate escapes, so ``os.fsencode(path)`` gives the
    bytes back) and names a store can't hold (:func:`name_problem`). Hidden folders
    (``.name``) are skipped; files whose extension is not in :data:`IMAGE_EXTENSIONS` are
    ignored silently.
    """
    root = Path(root)
    if not root.exists():
        raise PairkitError(f"image folder {root} not found")
    if not root.is_dir():
        raise PairkitError(f"{root} is not a folder")
    images: list[ImageFile] = []
    problems: list[tuple[str, str]] = []
    seen_dirs: set[tuple[int, int]] = set()

    def on_error(exc: OSError) -> None:
        rel = os.path.relpath(exc.filename, root) if exc.filename else "?"
        problems.append((Path(rel).as_posix(), f"folder unreadable: {exc.strerror}"))

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=on_error):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            rel = Path(os.path.relpath(dirpath, root)).as_posix()
            problems.append((rel, "symlink loop (folder already visited)"))
            dirnames[:] = []
            continue
        seen_dirs.add(key)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if Path(name).suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            abs_path = Path(dirpath) / name
            rel = Path(os.path.relpath(abs_path, root)).as_posix()
            problem = name_problem(rel)
            if problem is not None:
                problems.append((rel, problem))
                continue
            images.append(ImageFile(rel, abs_path))
    images.sort(key=lambda f: f.path)
    return _one_path_per_file(images, problems), problems


def _one_path_per_file(images: list[ImageFile], problems: list[tuple[str, str]]
                       ) -> list[ImageFile]:
    """``images`` with one path per file: a file reached by several paths (a symlink and
    its target, hard links) is one item, listed by its first path that is not a symlink
    (else its first); the others go to ``problems``. Two items of one file would be
    "copies" to dedup, which could keep the link and drop the file."""
    by_file: dict[tuple[int, int], list[ImageFile]] = {}
    for f in images:
        try:
            st = os.stat(f.abs_path)
        except OSError:  # a broken link: decoding reports it
            continue
        by_file.setdefault((st.st_dev, st.st_ino), []).append(f)
    dropped: set[str] = set()
    for paths in by_file.values():
        if len(paths) < 2:
            continue
        keep = next((f for f in paths if not os.path.islink(f.abs_path)), paths[0])
        for f in paths:
            if f is not keep:
                dropped.add(f.path)
                problems.append((f.path, f"the same file as {keep.path} (a link to it): "
                                         "listed once"))
    return [f for f in images if f.path not in dropped] if dropped else images


def name_problem(rel: str) -> str | None:
    """Why the file ``rel`` (relative to the image root, '/'-separated) can't be an item
    path, or None: a name that is not valid UTF-8, or one that the readers of a store
    (:func:`pairkit.core.paths.path_problem`, which takes ``\\`` for a separator) would
    refuse, such as ``..\\up.png`` or ``\\lead.png``: stored, it failed dedup."""
    if not _is_utf8(rel):
        return "file name is not valid UTF-8: rename it (store paths are UTF-8 text)"
    reason = path_problem(rel)
    if reason is None:
        return None
    if "\\" in rel:
        return (f"file name holds a backslash: rename it (store paths take '\\' for a folder "
                f"separator; read so, this name {reason.split(' (')[0]})")
    return f"file name can't be a store path: it {reason}"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_bytes(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, or DecodeError with the reason.

    The file is opened non-blocking and checked on the open descriptor: a FIFO, a device
    (``/dev/zero``), a socket, or a symlink to one is refused without reading.
    """
    try:
        _check_regular(os.stat(path).st_mode)  # before opening: a socket can't even be opened

        def check(st: os.stat_result) -> None:  # the file may have been swapped since the stat
            _check_regular(st.st_mode)
            if st.st_size > max_bytes:
                raise DecodeError(f"file too large ({st.st_size:,} bytes > --max-file-bytes "
                                  f"{max_bytes:,})")

        data = read_checked(path, max_bytes, check)
        if len(data) > max_bytes:
            raise DecodeError(f"file too large (grew past --max-file-bytes {max_bytes:,} while "
                              "read)")
    except FileNotFoundError:
        if path.is_symlink():
            raise DecodeError("broken symlink") from None
        raise DecodeError("file vanished during the run") from None
    except IsADirectoryError:
        raise DecodeError("is a folder") from None
    except PermissionError:
        raise DecodeError("permission denied") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DecodeError("symlink loop") from None
        raise DecodeError(f"unreadable: {exc.strerror or exc}") from None
    if not data:
        raise DecodeError("empty file (0 bytes)")
    return data


def _check_regular(mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise DecodeError("is a folder")
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            raise DecodeError(f"not a regular file ({name})")
    raise DecodeError("not a regular file")


def decode_image(data: bytes, draft_size: int | None = None) -> Image.Image:
    """Decode bytes to an 8-bit RGB PIL image with EXIF rotation applied.

    ``draft_size`` lets JPEG decode at a reduced scale that still keeps the
    short side >= draft_size (much faster for large photos).
    Raises DecodeError with a reason for anything that is not a usable image.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(data))
            # PIL only warns between 1x and 2x its limit, and the filter above is
            # process-wide: a thread pool's other decodes can drop it, so the size is
            # checked here too (before any pixel is decoded)
            check_pixels(img.size)
            if draft_size and img.format == "JPEG":
                w, h = img.size
                short = min(w, h)
                if short > draft_size:
                    scale = short / draft_size
                    img.draft("RGB", (int(w / scale) + 1, int(h / scale) + 1))
            img.load()
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise DecodeError(f"decompression bomb refused ({exc})".split(". ")[0]) from None
        except UnidentifiedImageError:
            raise DecodeError("not an image (unrecognised format)") from None
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise DecodeError(f"truncated or corrupt image ({exc})") from None
        with contextlib.suppress(Exception):  # broken EXIF must not lose the image
            img = ImageOps.exif_transpose(img) or img
        return to_rgb8(img)


def check_pixels(size: tuple[int, int]) -> None:
    """DecompressionBombError when an image of ``size`` (width, height) has more pixels
    than PIL's ``Image.MAX_IMAGE_PIXELS`` (None: no limit), as PIL's own warning says."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    pixels = int(size[0]) * int(size[1])
    if limit is not None and pixels > limit:
        raise Image.DecompressionBombError(
            f"Image size ({pixels} pixels) exceeds limit of {limit} pixels, could be "
            "decompression bomb DOS attack.")


def to_rgb8(img: Image.Image) -> Image.Image:
    """Any PIL mode -> 8-bit RGB; transparency (alpha, palette alphas or a tRNS colour key
    of an RGB, grey or 16-bit grey PNG) is composited over white. 16/32-bit
    integer images are scaled down when above 255; float images in [0, 1] scaled up, signed
    ones by their range; a NaN or inf pixel is a DecodeError."""
    import numpy as np
    from PIL import Image

    mode = img.mode
    key = img.info.get("transparency")  # a colour key (tRNS) or palette alphas
    if mode == "RGB" and key is None:
        return img
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(img, dtype=np.float32)
        if not np.isfinite(arr).all():
            raise DecodeError("pixel values not finite (a float image with NaN or inf)")
        clear = arr == key if isinstance(key, int) else None  # 16-bit grey tRNS
        low = float(arr.min()) if arr.size else 0.0
        top = float(arr.max()) if arr.size else 0.0
        if mode == "F" and low < 0.0 and top > low:  # a signed float image: by its range
            arr = (arr - low) / (top - low) * 255.0
        elif mode == "F" and top <= 1.0:  # floats in [0, 1]: the usual convention
            arr = arr * 255.0
        elif top > 255.0:
            arr = arr / (65535.0 if top > 4095 else top) * 255.0
        grey = np.clip(arr, 0, 255).astype(np.uint8)
        if clear is not None:
            grey[clear] = 255  # over white
        return Image.fromarray(grey, "L").convert("RGB")
    if key is not None and mode in ("P", "RGB", "L", "1"):  # Pillow applies the key
        img = img.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def load_image(path: Path, draft_size: int | None = None,
               max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> tuple[Image.Image, str]:
    """Read and decode one file: ``(rgb_image, sha256_of_bytes)``; DecodeError on failure."""
    data = read_bytes(path, max_bytes)
    digest = hashlib.sha256(data).hexdigest()
    return decode_image(data, draft_size), digest


def read_image_bytes(f: ImageFile, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    """The bytes of an image file or of a tar member (:mod:`pairkit.encode.webdataset`);
    DecodeError with the reason."""
    if isinstance(f.abs_path, str) and f.member is None:  # pairkit.encode.remote_images
        from pairkit.encode.remote_images import read_remote_image

        return read_remote_image(f.abs_path, max_bytes)
    if f.row is not None:
        from pairkit.encode.hf_datasets import read_row_bytes

        return read_row_bytes(f.abs_path, f.row[0], f.row[1], max_bytes)
    if f.member is None:
        return read_bytes(f.abs_path, max_bytes)
    from pairkit.encode.webdataset import read_member

    return read_member(f.abs_path, f.member[0], f.member[1], max_bytes)


def load_file(f: ImageFile, draft_size: int | None = None,
              max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> tuple[Image.Image, str]:
    """:func:`load_image` of a file or a tar member."""
    data = read_image_bytes(f, max_bytes)
    return decode_image(data, draft_size), hashlib.sha256(data).hexdigest()
