"""Views rendered in torch on the embedding device: the twin of :mod:`pairkit.encode.views`.

The same views as the PIL path, step for step, from the same random draws
(:func:`~pairkit.encode.views.view_rng`), so a store can mix rows of both paths:

- JPEG draft: PIL decodes a large JPEG at 1/2, 1/4 or 1/8 scale (``draft_size``); here the
  full picture is averaged down by the same factor (:func:`draft_scale`);
- resizing: antialiased bicubic/bilinear with PIL's kernels (a = -0.5), horizontal pass then
  vertical pass, rounded to 8 bits in between as PIL does; ``reducing_gap`` 3 for view 0;
- colour jitter: PIL's ``ImageEnhance`` blends (float, truncated to 8 bits after each step)
  and PIL's own RGB <-> HSV conversions for the hue shift.

What is not bit-exact: the JPEG decoder itself (nvjpeg on CUDA), the draft (a box average
instead of libjpeg's scaled IDCT), the filter taps at the edges of a random crop (PIL reads
past the crop box, here the crop is cut first) and float rounding. Measured differences and
the tolerance on vectors: docs/embed.md, tests/encode/test_device_views.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.encode.registry import Preprocess
from pairkit.encode.views import Augment, crop_box, pad_fill, timm_plan, view_rng

if TYPE_CHECKING:
    import torch

_SUPPORT = {"bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}


def _filter(name: str, x: np.ndarray) -> np.ndarray:
    """PIL's resampling kernels (Resample.c): triangle, bicubic with a = -0.5, Lanczos-3."""
    x = np.abs(x)
    if name == "bilinear":
        return np.where(x < 1.0, 1.0 - x, 0.0)
    if name == "lanczos":
        return np.where(x < 3.0, np.sinc(x) * np.sinc(x / 3.0), 0.0)
    a = -0.5
    return np.where(x < 1.0, ((a + 2.0) * x - (a + 3.0)) * x * x + 1,
                    np.where(x < 2.0, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def resample_weights(in_size: int, box0: float, box1: float, out_size: int,
                     interpolation: str) -> np.ndarray:
    """PIL's resampling matrix (out_size, in_size), float64: row i holds the normalised
    kernel taps of output pixel i for the span [box0, box1) of an axis of ``in_size``
    pixels (``precompute_coeffs`` in Pillow's Resample.c; taps may read outside the box).
    ``nearest`` picks the pixel under each output centre."""
    scale = (box1 - box0) / out_size
    centre = box0 + (np.arange(out_size) + 0.5) * scale
    weights = np.zeros((out_size, in_size))
    if interpolation == "nearest":
        weights[np.arange(out_size), np.clip(centre.astype(np.int64), 0, in_size - 1)] = 1.0
        return weights
    name = interpolation if interpolation in _SUPPORT else "bicubic"
    filterscale = max(scale, 1.0)
    support = _SUPPORT[name] * filterscale
    xmin = np.maximum((centre - support + 0.5).astype(np.int64), 0)
    xmax = np.minimum((centre + support + 0.5).astype(np.int64), in_size)
    ksize = int(np.ceil(support)) * 2 + 1
    cols = xmin[:, None] + np.arange(ksize)[None, :]
    valid = cols < xmax[:, None]
    w = _filter(name, (cols - centre[:, None] + 0.5) / filterscale) * valid
    total = w.sum(axis=1, keepdims=True)
    w = np.divide(w, total, out=np.zeros_like(w), where=total != 0)
    rows = np.broadcast_to(np.arange(out_size)[:, None], cols.shape)
    np.add.at(weights, (rows[valid], cols[valid]), w[valid])
    return weights


def draft_scale(width: int, height: int, draft_size: int | None) -> int:
    """The factor (1, 2, 4 or 8) PIL's JPEG ``draft`` decodes at, as
    :func:`pairkit.encode.images.decode_image` asks for it."""
    if not draft_size or min(width, height) <= draft_size:
        return 1
    scale = min(width, height) / draft_size
    req = (int(width / scale) + 1, int(height / scale) + 1)
    s = min(width // req[0], height // req[1])
    for a in (8, 4, 2):
        if s >= a:
            return a
    return 1


def to_device(values: Any, device: Any, dtype: Any = np.float32) -> torch.Tensor:
    """A host array (or list) on ``device`` without waiting for the device: a copy from
    pageable memory is staged at once and queued (torch's blocking copy would synchronise
    the stream first)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(values, dtype=dtype)).to(
        device, non_blocking=True)


def _round8(x: torch.Tensor) -> torch.Tensor:
    """Round half up and clip to 0..255 (PIL's 8-bit output of a resampling pass)."""
    return (x + 0.5).floor().clamp_(0, 255)


def box_reduce(img: torch.Tensor, fx: int, fy: int) -> torch.Tensor:
    """Average ``fx`` x ``fy`` blocks of (..., C, H, W) float pixels; edge blocks average what
    they hold (PIL's ``reduce``). Returns rounded 8-bit values as float."""
    import torch.nn.functional as F

    if fx == 1 and fy == 1:
        return img
    squeeze = img.dim() == 3
    x = img.unsqueeze(0) if squeeze else img
    out = _round8(F.avg_pool2d(x, (fy, fx), stride=(fy, fx), ceil_mode=True))
    return out[0] if squeeze else out


def resize(img: torch.Tensor, width: int, height: int, interpolation: str,
           box: tuple[float, float, float, float] | None = None) -> torch.Tensor:
    """Resize the ``box`` (left, top, right, bottom; default the whole picture) of
    (..., C, H, W) 8-bit-valued float pixels to ``height`` x ``width`` like PIL's
    ``Image.resize``: two passes, each a product with :func:`resample_weights` rounded to
    8 bits. Pillow picks the order of the passes by size by a rule of its own; here the
    vertical pass goes first for pictures more than 1.5 times taller than wide, which
    matched Pillow 13 in 87% of 400 random cases (the other order differs by one level on
    about a quarter of the pixels)."""

    h, w = int(img.shape[-2]), int(img.shape[-1])
    x0, y0, x1, y1 = box if box is not None else (0, 0, w, h)
    wx = wy = None
    if width != w or x0 != 0 or x1 != w:
        wx = to_device(resample_weights(w, x0, x1, width, interpolation).T, img.device)
    if height != h or y0 != 0 or y1 != h:
        wy = to_device(resample_weights(h, y0, y1, height, interpolation), img.device)
    x = img
    if h > 1.5 * w:  # vertical pass first
        x = x if wy is None else _round8(wy @ x)
        return x if wx is None else _round8(x @ wx)
    x = x if wx is None else _round8(x @ wx)
    return x if wy is None else _round8(wy @ x)


def plain_view(img: torch.Tensor, pre: Preprocess) -> torch.Tensor:
    """View 0 of a (3, H, W) float image (or a stack (..., 3, H, W) of one size): short
    side to ``pre.size`` and centre crop (or squash), with PIL's ``reducing_gap=3``
    pre-reduction; with ``pre.crop_pct`` set, timm's eval transform as
    :func:`pairkit.encode.views.timm_view` makes it. Returns (..., 3, S, S)."""
    size = pre.size
    h, w = int(img.shape[-2]), int(img.shape[-1])
    if pre.crop_pct is not None:  # timm's eval transform, as views.timm_view (no reduction)
        nw, nh, pad, left, top = timm_plan(w, h, pre)
        out = resize(img, nw, nh, pre.interpolation) if (nw, nh) != (w, h) else img
        if any(pad):
            fill = out.new_tensor(pad_fill(pre))
            canvas = fill.view(3, 1, 1).expand(*out.shape[:-2], nh + pad[1] + pad[3],
                                               nw + pad[0] + pad[2]).clone()
            canvas[..., pad[1]:pad[1] + nh, pad[0]:pad[0] + nw] = out
            out = canvas
        return out[..., top : top + size, left : left + size]
    if pre.resize == "squash":
        nw = nh = size
    else:
        scale = size / min(w, h)
        nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    if pre.interpolation != "nearest":
        fx, fy = max(1, int(w / nw / 3.0)), max(1, int(h / nh / 3.0))
        img = box_reduce(img, fx, fy)
    out = resize(img, nw, nh, pre.interpolation)
    left, top = (nw - size) // 2, (nh - size) // 2
    return out[..., top : top + size, left : left + size]


def _luma(x: torch.Tensor) -> torch.Tensor:
    """PIL's RGB -> L: (R*19595 + G*38470 + B*7471 + 2^15) >> 16, on (B, 3, H, W) floats."""
    import torch

    xi = x.to(dtype=torch.int32)
    luma = (xi[:, 0] * 19595 + xi[:, 1] * 38470 + xi[:, 2] * 7471 + 32768) >> 16
    return luma.unsqueeze(1).to(x.dtype)


def _blend(degenerate: torch.Tensor, image: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """PIL's ``Image.blend(degenerate, image, alpha)`` on 8-bit-valued floats: truncated."""
    return (degenerate + alpha * (image - degenerate)).clamp(0, 255).floor()


def _rgb_to_hsv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PIL's rgb2hsv on (B, 3, H, W) 8-bit floats: (h, s, v) 8-bit floats (B, H, W)."""
    import torch

    r, g, b = x[:, 0].double(), x[:, 1].double(), x[:, 2].double()
    maxc = torch.maximum(r, torch.maximum(g, b))
    minc = torch.minimum(r, torch.minimum(g, b))
    cr = (maxc - minc).float()
    grey = cr == 0
    crs = torch.where(grey, torch.ones_like(cr), cr)
    s = cr / torch.where(maxc == 0, torch.ones_like(cr), maxc.float())
    rc, gc, bc = ((maxc - r).float() / crs, (maxc - g).float() / crs, (maxc - b).float() / crs)
    h = torch.where(r == maxc, bc - gc, torch.where(g == maxc, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.fmod(h.double() / 6.0 + 1.0, 1.0).float()
    uh = torch.where(grey, 0.0, (h.double() * 255.0).trunc().clamp(0, 255))
    us = torch.where(grey, 0.0, (s.double() * 255.0).trunc().clamp(0, 255))
    return uh.float(), us.float(), maxc.float()


def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """PIL's hsv2rgb on 8-bit floats (B, H, W) -> (B, 3, H, W)."""
    import torch

    hd, sd, vd = h.double(), s.double(), v.double()
    i = torch.floor(hd * 6.0 / 255.0)
    f = hd * 6.0 / 255.0 - i
    fs = sd / 255.0
    p = torch.floor(vd * (1.0 - fs) + 0.5).clamp(0, 255)
    q = torch.floor(vd * (1.0 - fs * f) + 0.5).clamp(0, 255)
    t = torch.floor(vd * (1.0 - fs * (1.0 - f)) + 0.5).clamp(0, 255)
    sector = torch.remainder(i, 6).long()
    table = torch.stack([  # (6, 3, B, H, W): the switch of PIL's hsv2rgb
        torch.stack([vd, t, p]), torch.stack([q, vd, p]), torch.stack([p, vd, t]),
        torch.stack([p, q, vd]), torch.stack([t, p, vd]), torch.stack([vd, p, q])])
    idx = sector.unsqueeze(0).unsqueeze(0).expand(1, 3, *sector.shape)
    rgb = table.gather(0, idx)[0].permute(1, 0, 2, 3)
    grey = (s == 0).unsqueeze(1)
    return torch.where(grey, v.double().unsqueeze(1).expand_as(rgb), rgb).float()


def colour_jitter(x: torch.Tensor, brightness: Sequence[float], contrast: Sequence[float],
                  saturation: Sequence[float], hue_shift: Sequence[int]) -> torch.Tensor:
    """PIL's Brightness, Contrast, Color enhancements then the HSV hue shift, per image of a
    (B, 3, H, W) batch of 8-bit floats, with one factor per image."""
    import torch

    dev = x.device

    def col(v: Sequence[float]) -> torch.Tensor:
        return to_device(v, dev).view(-1, 1, 1, 1)

    x = _blend(torch.zeros_like(x), x, col(brightness))
    mean = _luma(x).mean(dim=(1, 2, 3), dtype=torch.float64)
    grey = torch.floor(mean + 0.5).float().view(-1, 1, 1, 1)
    x = _blend(grey.expand_as(x), x, col(contrast))
    x = _blend(_luma(x).expand_as(x), x, col(saturation))
    shift = to_device(list(hue_shift), dev).view(-1, 1, 1)
    if any(hue_shift):  # decided on the host: no wait for the device
        h, s, v = _rgb_to_hsv(x)
        h = torch.remainder(h + shift, 256.0)
        shifted = _hsv_to_rgb(h, s, v)
        x = torch.where((shift != 0).view(-1, 1, 1, 1), shifted, x)
    return x


def render_views_torch(img: torch.Tensor, source: str, views: int, pre: Preprocess,
                       seed: int, aug: Augment = Augment()) -> torch.Tensor:
    """All views of one decoded image, (3, H, W) uint8 on any device (already drafted, as
    PIL's ``draft`` would have left it): uint8 (views, 3, size, size) on the same device.

    The per-image path, view by view: the reference :func:`render_batch` is tested
    against (tests/encode/test_device_views.py)."""
    import torch

    size = pre.size
    out = torch.empty((views, 3, size, size), dtype=torch.float32, device=img.device)
    out[0] = plain_view(img.float(), pre)
    h, w = int(img.shape[-2]), int(img.shape[-1])
    factors = []
    for v in range(1, views):
        d = draw_view(seed, source, v, w, h, aug)
        view = resize(img.float(), size, size, pre.interpolation, box=d.box)
        out[v] = view.flip(-1) if d.flip else view
        factors.append(d)
    if factors:
        out[1:] = colour_jitter(out[1:], [d.brightness for d in factors],
                                [d.contrast for d in factors],
                                [d.saturation for d in factors],
                                [d.hue_shift for d in factors])
    return out.to(torch.uint8)


@dataclass(frozen=True)
class ViewDraw:
    """The random choices of one augmented view (:func:`pairkit.encode.views.augmented_view`
    draws them in this order from :func:`~pairkit.encode.views.view_rng`)."""

    box: tuple[int, int, int, int]
    flip: bool
    brightness: float
    contrast: float
    saturation: float
    hue_shift: int  # in 1/255 turns, PIL's HSV hue units


def draw_view(seed: int, source: str, view: int, width: int, height: int,
              aug: Augment = Augment()) -> ViewDraw:
    """The draws of view ``view`` (>= 1) of ``source``, a ``width`` x ``height`` image."""
    rng = view_rng(seed, source, view)
    box = crop_box(width, height, rng, aug)
    flip = bool(rng.uniform() < aug.flip)
    b = rng.uniform(1 - aug.brightness, 1 + aug.brightness)
    c = rng.uniform(1 - aug.contrast, 1 + aug.contrast)
    s = rng.uniform(1 - aug.saturation, 1 + aug.saturation)
    hue = rng.uniform(-aug.hue, aug.hue)
    return ViewDraw(box, flip, float(b), float(c), float(s), round(hue * 255) if hue else 0)


def render_batch(images: Sequence[torch.Tensor], sources: Sequence[str], views: int,
                 pre: Preprocess, seed: int, aug: Augment = Augment()) -> torch.Tensor:
    """Views of a batch of decoded (3, H, W) uint8 images (each already drafted):
    uint8 (len(images) * views, 3, size, size), image by image, view by view.

    Batched: images of one size are stacked and all their views rendered by a few large
    operations (view 0 by :func:`plain_view`; the crops of views 1.. by two batched matrix
    products of per-view resampling matrices, the flip folded into the horizontal one;
    one colour jitter for all augmented rows). Only the random draws (:func:`draw_view`)
    run per view, on the host, and nothing waits for the device. Equal to
    :func:`render_views_torch` image by image up to float summation order (at most one
    level on a pixel that lands on a rounding boundary; tested)."""
    import torch

    size = pre.size
    n = len(images)
    dev = images[0].device if images else torch.device("cpu")
    out = torch.empty((n * views, 3, size, size), dtype=torch.uint8, device=dev)
    if not n:
        return out
    groups: dict[tuple[int, int], list[int]] = {}
    for i, img in enumerate(images):
        groups.setdefault((int(img.shape[-2]), int(img.shape[-1])), []).append(i)
    draws = [[draw_view(seed, sources[i], v, int(images[i].shape[-1]),
                        int(images[i].shape[-2]), aug) for v in range(1, views)]
             for i in range(n)]
    crops: list[torch.Tensor] = []
    rows: list[int] = []
    picked: list[ViewDraw] = []
    for members in groups.values():
        x = torch.stack([images[i] for i in members]).float()
        first = to_device([i * views for i in members], dev, np.int64)
        out.index_copy_(0, first, plain_view(x, pre).to(torch.uint8))
        if views > 1:
            crops.append(_crops(x, [draws[i] for i in members], pre))
            rows += [i * views + v for i in members for v in range(1, views)]
            picked += [d for i in members for d in draws[i]]
    if rows:
        jittered = colour_jitter(torch.cat(crops), [d.brightness for d in picked],
                                 [d.contrast for d in picked], [d.saturation for d in picked],
                                 [d.hue_shift for d in picked])
        out.index_copy_(0, to_device(rows, dev, np.int64), jittered.to(torch.uint8))
    return out


def _crops(x: torch.Tensor, draws: Sequence[Sequence[ViewDraw]],
           pre: Preprocess) -> torch.Tensor:
    """The resized crops (flipped where drawn) of views 1.. of a stack ``x`` (G, 3, H, W) of
    8-bit float images of one size, ``draws[g]`` the views of image g: float (G * K, 3, S,
    S), image by image, view by view. Two rounded passes in :func:`resize`'s order, each
    one batched matrix product."""

    g, _, h, w = (int(v) for v in x.shape)
    k = len(draws[0])
    size = pre.size
    wx = np.empty((g, k, w, size), dtype=np.float32)
    wy = np.empty((g, k, size, h), dtype=np.float32)
    for a, row in enumerate(draws):
        for b, d in enumerate(row):
            x0, y0, x1, y1 = d.box
            mx = resample_weights(w, x0, x1, size, pre.interpolation).T
            wx[a, b] = mx[:, ::-1] if d.flip else mx  # a flip reverses the output columns
            wy[a, b] = resample_weights(h, y0, y1, size, pre.interpolation)
    tx, ty = to_device(wx, x.device), to_device(wy, x.device)
    if h > 1.5 * w:  # vertical pass first, as resize() does
        # (G, K*S, H) @ (G, H, 3*W) -> (G*K, S*3, W), then @ (G*K, W, S)
        t = _round8(ty.reshape(g, k * size, h) @ x.permute(0, 2, 1, 3).reshape(g, h, 3 * w))
        t = _round8(t.reshape(g * k, size * 3, w) @ tx.reshape(g * k, w, size))
        return t.reshape(g * k, size, 3, size).permute(0, 2, 1, 3).contiguous()
    # (G, 3*H, W) @ (G, W, K*S) -> (G*K, H, 3*S), then (G*K, S, H) @
    t = _round8(x.reshape(g, 3 * h, w) @ tx.permute(0, 2, 1, 3).reshape(g, w, k * size))
    t = t.reshape(g, 3, h, k, size).permute(0, 3, 2, 1, 4).reshape(g * k, h, 3 * size)
    t = _round8(ty.reshape(g * k, size, h) @ t)
    return t.reshape(g * k, size, 3, size).permute(0, 2, 1, 3).contiguous()


def drafted_batch(images: Sequence[torch.Tensor], draft_size: int | None
                  ) -> list[torch.Tensor]:
    """:func:`drafted` of each image, images of one size and factor averaged down together
    (one pooling per size instead of one per image; the same values)."""
    import torch

    out = list(images)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, img in enumerate(images):
        a = draft_scale(int(img.shape[-1]), int(img.shape[-2]), draft_size)
        if a > 1:
            groups.setdefault((*img.shape, a), []).append(i)
    for key, members in groups.items():
        a = key[-1]
        small = box_reduce(torch.stack([images[i] for i in members]).float(), a, a)
        for j, i in enumerate(small.to(torch.uint8).unbind(0)):
            out[members[j]] = i
    return out


def drafted(img: torch.Tensor, draft_size: int | None) -> torch.Tensor:
    """A full-size decoded (3, H, W) uint8 JPEG averaged down by PIL's draft factor, so it
    has the size PIL's drafted decode would have (ceil(W / a) x ceil(H / a))."""
    a = draft_scale(int(img.shape[-1]), int(img.shape[-2]), draft_size)
    if a == 1:
        return img
    import torch

    return box_reduce(img.float(), a, a).to(torch.uint8)


def grey_to_rgb(img: torch.Tensor) -> torch.Tensor:
    """(1, H, W) -> (3, H, W); (3, H, W) unchanged."""
    return img.expand(3, -1, -1) if img.shape[0] == 1 else img

