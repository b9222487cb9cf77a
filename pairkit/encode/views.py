"""Views: view 0 is the plain image, views 1.. are random meaning-preserving edits.

Every random choice of a view comes from a generator seeded by
``(seed, source, view)``, so a view is the same whatever the batch, the
worker, the order or an interrupted-and-resumed run.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pairkit.encode.registry import Preprocess

if TYPE_CHECKING:
    from PIL import Image


@dataclass(frozen=True)
class Augment:
    """The random edits of views 1.. (torchvision/SimCLR-style, milder colour)."""

    min_area: float = 0.35
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: float = 0.5
    brightness: float = 0.2
    contrast: float = 0.2
    saturation: float = 0.2
    hue: float = 0.02


_REDUCING_GAP = 3.0  # PIL's reducing_gap of view 0 (an integer pre-reduction, then resampling)
# view 0 of a longer picture resamples only its centre box (:func:`plain_view`); the device
# decoder leaves such JPEGs to PIL (:func:`pairkit.encode.jpeg.inspect_jpeg`)
MAX_WHOLE_RESIZE_ASPECT = 8


def view_rng(seed: int, source: str, view: int) -> np.random.Generator:
    """A generator that depends only on (seed, source, view)."""
    digest = hashlib.blake2b(f"{seed}\0{source}\0{view}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def pil_resample(name: str) -> int:
    """The PIL resampling filter of a preprocessing's ``interpolation`` (bicubic when
    unknown)."""
    from PIL import Image

    return {
        "bicubic": Image.Resampling.BICUBIC,
        "bilinear": Image.Resampling.BILINEAR,
        "nearest": Image.Resampling.NEAREST,
        "lanczos": Image.Resampling.LANCZOS,
    }.get(name, Image.Resampling.BICUBIC)


def timm_plan(width: int, height: int, pre: Preprocess
              ) -> tuple[int, int, tuple[int, int, int, int], int, int]:
    """timm's eval transform (``transforms_imagenet_eval``) of a ``width`` x ``height``
    picture as sizes: ``(nw, nh, pad, left, top)``: resize to nw x nh, pad (left, top,
    right, bottom), then crop ``pre.size`` square at (left, top). The resize goes to
    ``floor(size / crop_pct)``: the short side (``shortest``: torchvision's ``Resize``,
    the long side truncated), both sides (``squash``) or the long side (``border``:
    timm's ``ResizeKeepRatio``, rounded); the crop is torchvision's centre crop."""
    size = pre.size
    scale = math.floor(size / (pre.crop_pct or 1.0))
    if pre.resize == "squash":
        nw = nh = scale
    elif pre.resize == "border":
        ratio = max(height / scale, width / scale)
        nw, nh = round(width / ratio), round(height / ratio)
    elif width <= height:
        nw, nh = scale, int(scale * height / width)
    else:
        nw, nh = int(scale * width / height), scale
    pad = ((size - nw) // 2 if size > nw else 0, (size - nh) // 2 if size > nh else 0,
           (size - nw + 1) // 2 if size > nw else 0, (size - nh + 1) // 2 if size > nh else 0)
    pw, ph = nw + pad[0] + pad[2], nh + pad[1] + pad[3]
    return nw, nh, pad, int(round((pw - size) / 2.0)), int(round((ph - size) / 2.0))


def pad_fill(pre: Preprocess) -> tuple[int, int, int]:
    """The colour of timm's padding: the mean for ``border``, black otherwise."""
    if pre.resize == "border":
        return tuple(round(255 * v) for v in pre.mean)  # type: ignore[return-value]
    return (0, 0, 0)


def timm_view(img: Image.Image, pre: Preprocess) -> Image.Image:
    """View 0 with ``pre.crop_pct`` set: timm's eval transform (:func:`timm_plan`), pixel
    for pixel as ``timm.data.create_transform`` makes it from PIL (no ``reducing_gap``).
    A picture whose resize would be more than :data:`MAX_WHOLE_RESIZE_ASPECT` times the
    scale long resamples only the box it keeps."""
    from PIL import Image as PILImage

    size = pre.size
    resample = pil_resample(pre.interpolation)
    w, h = img.size
    nw, nh, pad, left, top = timm_plan(w, h, pre)
    scale = math.floor(size / (pre.crop_pct or 1.0))
    if not any(pad) and max(nw, nh) > MAX_WHOLE_RESIZE_ASPECT * scale:
        sx, sy = w / nw, h / nh
        return img.resize((size, size), resample,
                          box=(left * sx, top * sy, (left + size) * sx, (top + size) * sy))
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), resample)
    if any(pad):
        canvas = PILImage.new("RGB", (nw + pad[0] + pad[2], nh + pad[1] + pad[3]),
                              pad_fill(pre))
        canvas.paste(img, (pad[0], pad[1]))
        img = canvas
    return img.crop((left, top, left + size, top + size))


def plain_view(img: Image.Image, pre: Preprocess) -> Image.Image:
    """Resize (short side to ``pre.size``, centre crop; or squash) to size x size; with
    ``pre.crop_pct`` set, timm's eval transform (:func:`timm_view`).

    A picture more than :data:`MAX_WHOLE_RESIZE_ASPECT` times longer than wide is not
    resized whole (a 2 x 20000 strip scaled to short side 224 would be 500 M pixels): only
    its centre box is resampled, in O(size^2) memory, giving the same pixels up to one or
    two levels at the filter's rounding (and a pixel's shift for ``nearest``)."""
    if pre.crop_pct is not None:
        return timm_view(img, pre)
    size = pre.size
    resample = pil_resample(pre.interpolation)
    w, h = img.size
    if pre.resize == "squash":
        return img.resize((size, size), resample)
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    left, top = (nw - size) // 2, (nh - size) // 2
    if max(nw, nh) <= MAX_WHOLE_RESIZE_ASPECT * size:
        img = img.resize((nw, nh), resample, reducing_gap=_REDUCING_GAP)
        return img.crop((left, top, left + size, top + size))
    sx, sy = w / nw, h / nh  # source pixels per output pixel
    box = (left * sx, top * sy, (left + size) * sx, (top + size) * sy)
    fx = fy = 1
    if pre.interpolation != "nearest":
        fx, fy = max(1, int(sx / _REDUCING_GAP)), max(1, int(sy / _REDUCING_GAP))
    if fx == 1 and fy == 1:
        return img.resize((size, size), resample, box=box)
    # PIL's reducing_gap pre-reduction, of the part the filter reads (at most 3 output
    # pixels either side, Lanczos) on multiples of the factor: the whole picture's blocks
    mx, my = 4 * max(sx, fx) + fx, 4 * max(sy, fy) + fy
    rx0 = max(0, int((box[0] - mx) // fx) * fx)
    ry0 = max(0, int((box[1] - my) // fy) * fy)
    rx1 = min(w, math.ceil((box[2] + mx) / fx) * fx)
    ry1 = min(h, math.ceil((box[3] + my) / fy) * fy)
    small = img.reduce((fx, fy), box=(rx0, ry0, rx1, ry1))
    return small.resize((size, size), resample, box=(
        (box[0] - rx0) / fx, (box[1] - ry0) / fy, (box[2] - rx0) / fx, (box[3] - ry0) / fy))


def crop_box(
    width: int, height: int, rng: np.random.Generator, aug: Augment
) -> tuple[int, int, int, int]:
    """A random-resized-crop box (left, top, right, bottom) covering >= min_area."""
    area = width * height
    log_lo, log_hi = math.log(aug.ratio[0]), math.log(aug.ratio[1])
    for _ in range(10):
        target = area * rng.uniform(aug.min_area, 1.0)
        ratio = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * ratio))
        h = round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            left = int(rng.integers(0, width - w + 1))
            top = int(rng.integers(0, height - h + 1))
            return left, top, left + w, top + h
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def augmented_view(
    img: Image.Image, pre: Preprocess, rng: np.random.Generator, aug: Augment = Augment()
) -> Image.Image:
    """Random resized crop to size x size, horizontal flip, mild colour jitter."""
    from PIL import Image, ImageEnhance

    box = crop_box(img.width, img.height, rng, aug)
    out = img.resize((pre.size, pre.size), pil_resample(pre.interpolation), box=box)
    if rng.uniform() < aug.flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    b = rng.uniform(1 - aug.brightness, 1 + aug.brightness)
    c = rng.uniform(1 - aug.contrast, 1 + aug.contrast)
    s = rng.uniform(1 - aug.saturation, 1 + aug.saturation)
    hue = rng.uniform(-aug.hue, aug.hue)
    out = ImageEnhance.Brightness(out).enhance(b)
    out = ImageEnhance.Contrast(out).enhance(c)
    out = ImageEnhance.Color(out).enhance(s)
    if hue:
        hsv = np.asarray(out.convert("HSV")).copy()
        hsv[..., 0] = (hsv[..., 0].astype(np.int16) + round(hue * 255)) % 256
        out = Image.fromarray(hsv, "HSV").convert("RGB")
    return out


def render_views(
    img: Image.Image, source: str, views: int, pre: Preprocess, seed: int
) -> np.ndarray:
    """All views of one image as uint8 array (views, 3, size, size)."""
    out = np.empty((views, 3, pre.size, pre.size), dtype=np.uint8)
    for v in range(views):
        rendered = plain_view(img, pre) if v == 0 else augmented_view(
            img, pre, view_rng(seed, source, v)
        )
        out[v] = np.asarray(rendered, dtype=np.uint8).transpose(2, 0, 1)
    return out
