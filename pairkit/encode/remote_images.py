"""Image folders on object storage (``embed s3://bucket/photos/ -o ...``): listing the
objects and reading one, with the local reader's limits.

An object under the prefix whose name ends in an image extension is an image; its path
in the store is its key below the prefix (``/``-separated, as for a folder); keys with a
hidden component (``.name``) are skipped as hidden folders are. Each image is one GET of
at most ``--max-file-bytes`` (its size is checked first, from the listing).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from pairkit.errors import PairkitError


def discover_remote_images(url: str) -> tuple[list[Any], list[tuple[str, str]]]:
    """``(images, problems)`` as :func:`pairkit.encode.images.discover_images` gives for a
    folder: every image object under ``url/``, sorted by path; ``abs_path`` is the
    object's URL (a str)."""
    from pairkit.core.remote import filesystem, scheme
    from pairkit.encode.images import IMAGE_EXTENSIONS, ImageFile, name_problem

    fs, base = filesystem(url)
    base = base.rstrip("/")
    try:
        fs.invalidate_cache(base)
        found = fs.find(base, detail=True)
    except FileNotFoundError:
        found = {}
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise PairkitError(f"listing {url} failed: {type(exc).__name__}: {first}") from None
    if not found:
        raise PairkitError(f"image folder {url} not found (no objects under it)")
    prefix = f"{scheme(url)}://"
    images = []
    problems: list[tuple[str, str]] = []
    for key, info in found.items():
        if info.get("type") != "file":
            continue
        rel = key[len(base) + 1:] if key.startswith(base + "/") else None
        if not rel:
            continue
        parts = PurePosixPath(rel).parts
        if any(p.startswith(".") for p in parts[:-1]):
            continue
        if PurePosixPath(rel).suffix.lower() not in IMAGE_EXTENSIONS:
            continue
        problem = name_problem(rel)
        if problem is not None:
            problems.append((rel, problem))
            continue
        images.append(ImageFile(rel, prefix + key))  # type: ignore[arg-type]
    images.sort(key=lambda f: f.path)
    return images, sorted(problems)


def read_remote_image(url: str, max_bytes: int) -> bytes:
    """The object's bytes, or DecodeError with the reason (too large, gone, unreadable)."""
    from pairkit.core.remote import read_bytes
    from pairkit.encode.images import DecodeError

    try:
        data = read_bytes(url, max_bytes)
    except FileNotFoundError:
        raise DecodeError("object vanished during the run") from None
    except PairkitError as exc:
        text = str(exc)
        if "more than" in text:  # "URL is 2,000 bytes, more than 1,000" (the URL may hold " is ")
            sizes = re.findall(r" is ([\d,]+) bytes, more than ", text)
            size = f"{sizes[-1]} bytes > " if sizes else "> "
            raise DecodeError(f"file too large ({size}--max-file-bytes {max_bytes:,})"
                              ) from None
        raise DecodeError(f"unreadable: {text}") from None
    if not data:
        raise DecodeError("empty file (0 bytes)")
    return data
