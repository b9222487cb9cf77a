"""dedup's ``--keep best``: no-reference signals of how much an image file lost, the
sort key they make and the reason a copy was kept.

A near-duplicate group holds an original and copies made from it: re-encoded (lossy),
resized down and up again, blurred, upscaled, brightened. None of them can be compared
with the original's pixels (which copy is the original is the question), so each file is
judged alone, from its decoded pixels:

- ``lossy``: the file is a JPEG (or a lossy WebP): its pixels were quantised when written;
  ``quality``: the libjpeg quality its luminance quantisation table implies;
- ``native_scale``: the smallest scale s (of :data:`SCALES`) at which the image shrunk to
  s and enlarged back keeps its detail (residual energy below :data:`DETAIL_LOSS` of its
  variance). An image upscaled by k, or blurred, survives s ~ 1/k; an original at its
  native size needs s = 1. ``effective_pixels = pixels * native_scale**2`` is the
  resolution the file really holds;
- ``sharpness``: energy of the Laplacian per pixel over the image's variance, away from
  JPEG's 8x8 block edges (a blurred or resampled copy has less);
- ``clipped``: share of channel values at 0 or 255 (a brightened or contrast-stretched
  copy clips more).

tests/benchmarks/dedup_keep.py measures which of these pick the original on planted
copies (docs/dedup.md, docs/benchmarks.md). What it found decides :func:`best_key`: JPEG
quality in three bands first (lossless and quality >= 90 alike, so a JPEG original is not
beaten by a blurred PNG of itself), then ``detail = log2(sharpness) + 1.5 log2(pixels) -
8 clipped`` (sharpness alone prefers a shrunk copy, pixels alone an upscaled one; with the
exponent 1.5 every upscaled copy loses and about 60 % of the shrunk copies of smooth
images do: no per-file signal can tell a lossless resize of a smooth image from its
original), then file size, then the path. What no per-file signal can tell, which size
of a resized image came first, :mod:`pairkit.mine.keep_resized` settles by comparing the
two files of a group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

SCALES = (0.125, 0.1875, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875)
DETAIL_LOSS = 0.002  # residual energy / variance at which a rescale counts as lossless
MAX_SIDE = 1024  # larger images are judged on a centre crop of this size (cost bound)
LOSSY_FORMATS = ("JPEG", "MPO")
PIXELS_WEIGHT = 1.5  # detail = log2(sharpness) + PIXELS_WEIGHT log2(pixels) - CLIP_WEIGHT clipped
CLIP_WEIGHT = 8.0


@dataclass(frozen=True)
class CopyFacts:
    """What one image file holds: ``pixels`` (w*h), ``bytes`` (file size), ``lossy``,
    ``quality`` (JPEG quality, 100 when lossless), ``native_scale`` in (0, 1],
    ``sharpness`` >= 0, ``clipped`` in [0, 1]."""

    pixels: float
    bytes: float
    lossy: bool
    quality: float
    native_scale: float
    sharpness: float
    clipped: float

    @property
    def effective_pixels(self) -> float:
        return self.pixels * self.native_scale ** 2

    @property
    def quality_band(self) -> int:
        """2: lossless or JPEG quality >= 90; 1: 75-89; 0: below 75."""
        return 2 if self.quality >= 90 else 1 if self.quality >= 75 else 0

    def detail_terms(self) -> tuple[float, float, float]:
        """The three terms of ``detail``: sharpness, pixels and clipping (log2 units)."""
        return (math.log2(max(self.sharpness, 1e-12)),
                PIXELS_WEIGHT * math.log2(max(self.pixels, 1.0)),
                -CLIP_WEIGHT * self.clipped)

    @property
    def detail(self) -> float:
        return sum(self.detail_terms())


def best_key(facts: CopyFacts) -> tuple[float, ...]:
    """The ``best`` rule's sort key of one file (higher is kept; the path breaks ties)."""
    return (facts.quality_band, facts.detail, facts.bytes)


TERM_REASONS = ("sharper", "more pixels", "fewer clipped pixels")


def keep_reason(kept: CopyFacts | None, other: CopyFacts | None) -> str:
    """Why ``kept`` ranks above ``other`` (the group's runner-up) under :func:`best_key`:
    ``lossless``/``higher JPEG quality``, the largest term of ``detail`` (``sharper``, ``more
    pixels``, ``fewer clipped pixels``), ``larger file``, ``same image: shortest path`` or
    ``only readable copy``."""
    if kept is None:
        return "no copy readable: shortest path"
    if other is None:
        return "only readable copy"
    if kept.quality_band != other.quality_band:
        return "lossless" if not kept.lossy else "higher JPEG quality"
    if kept.detail != other.detail:
        gains = [a - b for a, b in zip(kept.detail_terms(), other.detail_terms(), strict=True)]
        return TERM_REASONS[int(np.argmax(gains))]
    if kept.bytes != other.bytes:
        return "larger file"
    return "same image: shortest path"

# libjpeg's standard luminance table (quality 50), in zig-zag order as PIL reports it
_STD_LUMA_MEAN = 57.625


def jpeg_quality(im: object) -> float:
    """The libjpeg quality (1-100) a JPEG was most likely saved with, from its luminance
    quantisation table; 100 for a file that is not lossy."""
    if not _lossy(im):
        return 100.0
    tables = getattr(im, "quantization", None) or {}
    if 0 not in tables:
        return 75.0  # a lossy WebP: no table to read; libwebp's default quality
    scale = 100.0 * float(np.mean(tables[0])) / _STD_LUMA_MEAN
    quality = (200.0 - scale) / 2.0 if scale <= 100 else 5000.0 / scale
    return float(np.clip(quality, 1.0, 100.0))


def _lossy(im: object) -> bool:
    fmt = getattr(im, "format", None)
    if fmt in LOSSY_FORMATS:
        return True
    if fmt == "WEBP":  # lossless WebP files carry a VP8L chunk
        info = getattr(im, "info", {}) or {}
        return not info.get("lossless", False)
    return False


def _grey(rgb: np.ndarray) -> np.ndarray:
    return (rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114) / 255.0


def sharpness(grey: np.ndarray) -> float:
    """Mean squared 4-neighbour Laplacian over the variance (0 for a flat image)."""
    if min(grey.shape) < 3:
        return 0.0
    lap = (4 * grey[1:-1, 1:-1] - grey[:-2, 1:-1] - grey[2:, 1:-1]
           - grey[1:-1, :-2] - grey[1:-1, 2:])
    # JPEG's 8x8 block edges add Laplacian energy that is loss, not detail: skip the
    # rows and columns next to them (positions 7 and 8 mod 8 of the image grid)
    ys, xs = np.arange(1, grey.shape[0] - 1) % 8, np.arange(1, grey.shape[1] - 1) % 8
    inner = lap[(ys != 7) & (ys != 0)][:, (xs != 7) & (xs != 0)]
    var = float(grey.var())
    return float((inner ** 2).mean() / var) if var > 1e-8 and inner.size else 0.0


def native_scale(grey: np.ndarray) -> float:
    """The smallest of :data:`SCALES` (or 1) at which shrinking and enlarging back loses
    under :data:`DETAIL_LOSS` of the image's variance."""
    from PIL import Image

    var = float(grey.var())
    h, w = grey.shape
    if var <= 1e-8 or min(h, w) < 8:
        return 1.0
    im = Image.fromarray(grey.astype(np.float32), "F")
    best = 1.0
    for s in sorted(SCALES, reverse=True):
        small = im.resize((max(1, round(w * s)), max(1, round(h * s))), Image.Resampling.BICUBIC)
        back = np.asarray(small.resize((w, h), Image.Resampling.BICUBIC), dtype=np.float64)
        # the border is resampled from fewer pixels: judge the inside
        m = max(2, round(2 / s))
        loss = float(((back - grey)[m:-m, m:-m] ** 2).mean()) / var
        if loss > DETAIL_LOSS:
            break
        best = s
    return best


def copy_facts(path: Path | BinaryIO, native: bool = False,
               size: float | None = None) -> CopyFacts | None:
    """:class:`CopyFacts` of the image at ``path`` (or in a file object: a tar member's or
    dataset row's bytes, :func:`pairkit.encode.item_images.item_image`); None when it
    can't be read. ``size``: its bytes (None: the file's size). ``native_scale`` is
    measured only with ``native`` (the benchmark's; :func:`best_key` does not use it: it
    picked the original in under 30 % of planted pairs), else 1."""
    from PIL import Image

    from pairkit.encode.images import check_pixels

    try:
        size = float(path.stat().st_size if size is None else size)  # type: ignore[union-attr]
        with Image.open(path) as im:
            check_pixels(im.size)  # the bomb guard's 1-2x range too, as embed refuses it
            lossy, quality = _lossy(im), jpeg_quality(im)
            w, h = im.size
            if max(w, h) > MAX_SIDE:
                left, top = (w - min(w, MAX_SIDE)) // 2, (h - min(h, MAX_SIDE)) // 2
                im = im.crop((left, top, left + min(w, MAX_SIDE), top + min(h, MAX_SIDE)))
            rgb = np.asarray(im.convert("RGB"), dtype=np.float64)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    grey = _grey(rgb)
    clipped = float(((rgb <= 0) | (rgb >= 255)).mean())
    return CopyFacts(float(w * h), size, lossy, quality,
                     native_scale(grey) if native else 1.0, sharpness(grey), clipped)
