"""Finding image files and decoding them safely.

Decoding never trusts the file: PIL's decompression-bomb limit stays on (its
warning is raised as an error, so a bomb is refused before its pixels are
allocated), EXIF rotation is applied, and every mode (CMYK, 16-bit, palette
with transparency, grey+alpha) becomes 8-bit RGB.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pairkit.errors import PairkitError

if TYPE_CHECKING:
    from PIL import Image

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm"}
)


class DecodeError(Exception):
    """A file that can't be embedded; ``str(exc)`` is the reason recorded in errors.jsonl."""


@dataclass(frozen=True)
class ImageFile:
    path: str  # relative to the image root, '/'-separated
    abs_path: Path


def discover_images(root: str | os.PathLike[str]) -> tuple[list[ImageFile], list[tuple[str, str]]]:
    """All image files under ``root`` (recursive, symlinks followed once), sorted by path.

    Returns ``(images, problems)``; ``problems`` lists ``(path, reason)`` for
    folders that could not be read and symlink loops. Hidden folders (``.name``)
    are skipped; files with other extensions are ignored silently.
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
            images.append(ImageFile(rel, abs_path))
    images.sort(key=lambda f: f.path)
    return images, problems


def read_bytes(path: Path) -> bytes:
    """The file's bytes, or DecodeError with the reason."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if path.is_symlink():
            raise DecodeError("broken symlink") from None
        raise DecodeError("file vanished during the run") from None
    except IsADirectoryError:
        raise DecodeError("is a folder") from None
    except PermissionError:
        raise DecodeError("permission denied") from None
    except OSError as exc:
        raise DecodeError(f"unreadable: {exc.strerror or exc}") from None
    if not data:
        raise DecodeError("empty file (0 bytes)")
    return data


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


def to_rgb8(img: Image.Image) -> Image.Image:
    """Any PIL mode -> 8-bit RGB; transparency is composited over white."""
    import numpy as np
    from PIL import Image

    mode = img.mode
    if mode == "RGB":
        return img
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(img, dtype=np.float32)
        top = float(arr.max()) if arr.size else 0.0
        if top > 255.0:
            arr = arr / (65535.0 if top > 4095 else top) * 255.0
        return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "L").convert("RGB")
    if mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def load_image(path: Path, draft_size: int | None = None) -> tuple[Image.Image, str]:
    """Read and decode one file: ``(rgb_image, sha256_of_bytes)``; DecodeError on failure."""
    data = read_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    return decode_image(data, draft_size), digest
