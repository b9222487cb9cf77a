"""The pixel check of near-duplicate candidates: grey thumbnails of the store's images,
their best correlation over small shifts and scales, and a shift-tolerant descriptor.

A near-copy (re-encode, resize, a 1-2 px shift or a small crop, a brightness change) is
the same picture up to a small geometric and photometric change; two look-alikes are
not. After aligning the two thumbnails (the best of a few scales and sub-pixel shifts),
the Pearson correlation of the grey levels is near 1 for a copy whatever the encoder
said about it, and brightness and contrast drop out of it. This is the verification step
of copy detection (Douze et al., *The 2021 Image Similarity Dataset and Challenge*,
2021; Pizzi et al., *A Self-Supervised Descriptor for Image Copy Detection*, CVPR 2022:
candidates from a descriptor, then a check that the two images align), here with a
dense grey-level alignment instead of local features, which is enough for the small
edits pairkit calls near-duplicates.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np

THUMB = 32  # thumbnail side (pixels)
MARGIN = 4  # border left out of the comparison (room for the shifts and scales)
DESCRIPTOR = 12  # side of the blurred descriptor thumbnail
# the search: each stage tries (scale, dx, dy) offsets around the best transform so far,
# in thumbnail pixels; coarse to fine down to a quarter pixel (a sharp image loses
# correlation fast when misaligned by a fraction of a pixel)
STAGES = (
    tuple((1.0, dx, dy) for dx in (-2.0, 0.0, 2.0) for dy in (-2.0, 0.0, 2.0)),
    tuple((0.0, dx, dy) for dx in (-1.0, 0.0, 1.0) for dy in (-1.0, 0.0, 1.0)),
    tuple((s, dx, dy) for s in (-0.02, 0.0, 0.02) for dx in (-0.5, 0.0, 0.5)
          for dy in (-0.5, 0.0, 0.5)),
)
MAX_ZOOM = 0.05  # crops up to about 5% of the side
FLAT = 1e-3  # a window whose grey levels vary less than this (0..1 scale) is flat


def load_thumbnails(path: Path | io.BytesIO, sizes: tuple[int, ...] = (THUMB,)
                    ) -> list[np.ndarray] | None:
    """Grey thumbnails of one image file (or of a tar member's or dataset row's bytes:
    :func:`pairkit.encode.item_images.item_image`), one (side, side) float32 array in
    [0, 1] per side in ``sizes``, or None when the file can't be read (missing, not a
    regular file, too large, a decompression bomb: the decoder of ``embed``)."""
    from pairkit.encode.images import DecodeError
    from pairkit.encode.item_images import load_item_source

    try:
        img = load_item_source(path, draft_size=2 * max(sizes))
    except (DecodeError, OSError, ValueError):
        return None
    return thumbnails_of(img, sizes)


def thumbnails_of(img: object, sizes: tuple[int, ...] = (THUMB,)) -> list[np.ndarray]:
    """Grey thumbnails of a PIL image (see :func:`load_thumbnails`); a non-square image
    is squashed to a square."""
    from PIL import Image

    grey = img.convert("L")  # type: ignore[attr-defined]
    out = []
    for size in sizes:
        small = min(grey.size) >= size
        t = grey.resize((size, size), Image.Resampling.BOX if small
                        else Image.Resampling.BILINEAR)
        out.append(np.asarray(t, dtype=np.float32) / 255.0)
    return out


def read_thumbnails(image_root: str | Path | np.ndarray, paths: np.ndarray, ids: np.ndarray,
                    size: int = THUMB, progress: Callable[[int], None] | None = None,
                    image_column: str | np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Thumbnails of the items ``ids``: ``(thumbs (n, size, size) float32, ok (n,) bool)``;
    rows of unreadable images (or of paths that would leave the image root: never opened)
    are zero and not ok. ``image_root``: one folder, or one per item ((N,) array: items
    of several stores); ``image_column`` alike (a dataset store's ``embed
    --image-column``: :func:`pairkit.encode.item_images.image_column_of`). Plain files, tar
    members and dataset rows are read as ``embed`` read them. ``progress(1)`` after each
    item."""
    from pairkit.encode.item_images import item_image

    ids = np.asarray(ids, dtype=np.int64)
    thumbs = np.zeros((len(ids), size, size), dtype=np.float32)
    ok = np.zeros(len(ids), dtype=bool)
    for k, i in enumerate(ids):
        root = image_root[i] if isinstance(image_root, np.ndarray) else image_root
        column = image_column[i] if isinstance(image_column, np.ndarray) else image_column
        got = item_image(root, str(paths[i]), image_column=column)
        t = None if got is None else load_thumbnails(got[0], (size,))
        if t is not None:
            thumbs[k], ok[k] = t[0], True
        if progress is not None:
            progress(1)
    return thumbs, ok


def descriptors(thumbs: np.ndarray, side: int = DESCRIPTOR) -> np.ndarray:
    """(n, side * side) float32 L2-normalised descriptors: the thumbnail blurred and
    shrunk to ``side`` x ``side``, mean removed. A shift of a few thumbnail pixels moves it
    little, so copies that an encoder scatters are near each other here."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(thumbs, dtype=np.float32))[:, None]
    x = F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)
    x = F.interpolate(x, size=(side, side), mode="area").flatten(1)
    x = x - x.mean(dim=1, keepdim=True)
    norm = x.norm(dim=1, keepdim=True)
    x = torch.where(norm > FLAT, x / norm.clamp_min(1e-12), torch.zeros_like(x))
    return x.numpy().astype(np.float32)


def _grids(scales: np.ndarray, shifts: np.ndarray, size: int, margin: int) -> object:
    """Sampling grids (P, T, w, w, 2) in grid_sample coordinates: the central window of
    side ``size - 2 * margin`` of an image scaled by ``scales`` (P, T) about its centre
    and shifted by ``shifts`` (P, T, 2) thumbnail pixels. Built from its x and y rows
    (the grid is separable), not by scaling a (w, w, 2) base per transform."""
    import torch

    w = size - 2 * margin
    centres = (torch.arange(w, dtype=torch.float32) + margin + 0.5) * 2.0 / size - 1.0
    s = torch.as_tensor(scales, dtype=torch.float32)[..., None]
    d = torch.as_tensor(shifts, dtype=torch.float32) * (2.0 / size)
    gx = centres * s + d[..., 0:1]  # (P, T, w): x of each column
    gy = centres * s + d[..., 1:2]  # y of each row
    lead = gx.shape[:-1]
    return torch.stack([gx[..., None, :].expand(*lead, w, w),
                        gy[..., :, None].expand(*lead, w, w)], dim=-1)


def _standardise(x: object) -> tuple[object, object]:
    """Rows of ``x`` (..., m) minus their mean over unit norm, and whether each is flat."""
    z, flat, _ = _standardise_norm(x)
    return z, flat


def _standardise_norm(x: object) -> tuple[object, object, object]:
    """:func:`_standardise` and the norm (..., 1) each row was divided by."""
    x = x - x.mean(dim=-1, keepdim=True)
    norm = x.norm(dim=-1, keepdim=True)
    flat = norm[..., 0] < FLAT * (x.shape[-1] ** 0.5)
    norm = norm.clamp_min(1e-12)
    return x / norm, flat, norm


def aligned_correlation(a: np.ndarray, b: np.ndarray, block: int = 256,
                        margin: int = MARGIN) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P,) float32: for each pair of thumbnails ``a[p]``, ``b[p]`` ((P, s, s) grey), the
    best Pearson correlation between the central window of ``b`` and ``a`` scaled and
    shifted (bilinear), over a coarse grid of transforms then a finer one around the
    best. Two flat windows score 1 when their grey levels are within 0.1, a flat and a
    textured window 0."""
    import torch
    import torch.nn.functional as F

    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    n, size = len(a), a.shape[-1]
    out = np.zeros(n, dtype=np.float32)
    out_s = np.ones(n, dtype=np.float32)
    out_d = np.zeros((n, 2), dtype=np.float32)
    w = size - 2 * margin
    with torch.no_grad():
        for lo in range(0, n, block):
            ta = torch.from_numpy(a[lo: lo + block])[:, None]
            tb = torch.from_numpy(b[lo: lo + block])
            p = len(ta)
            bw = tb[:, margin: size - margin, margin: size - margin].reshape(p, -1)
            bz, b_flat = _standardise(bw)
            b_mean = bw.mean(dim=1)

            def score(scales: torch.Tensor, shifts: torch.Tensor, ta: torch.Tensor = ta,
                      bz: torch.Tensor = bz, p: int = p) -> torch.Tensor:
                t = scales.shape[1]
                grid = _grids(scales, shifts, size, margin).reshape(p, t * w, w, 2)
                sampled = F.grid_sample(ta, grid, mode="bilinear", padding_mode="border",
                                        align_corners=False).reshape(p, t, w * w)
                az, _ = _standardise(sampled)
                return torch.einsum("ptm,pm->pt", az, bz)

            s0 = torch.ones(p)
            d0 = torch.zeros(p, 2)
            r = torch.full((p,), -2.0)
            for k, stage in enumerate(STAGES):
                off = torch.tensor(stage, dtype=torch.float32)
                scales = (off[None, :, 0] if k == 0 else s0[:, None] + off[None, :, 0])
                scales = scales.expand(p, -1)
                shifts = d0[:, None, :] + off[None, :, 1:]
                got = score(scales, shifts)
                best = got.argmax(dim=1)
                top = got[torch.arange(p), best]
                better = top > r
                r = torch.where(better, top, r)
                s0 = torch.where(better, scales[torch.arange(p), best], s0)
                d0 = torch.where(better[:, None], shifts[torch.arange(p), best], d0)
            aw = ta[:, 0, margin: size - margin, margin: size - margin].reshape(p, -1)
            _, a_flat = _standardise(aw)
            both = a_flat & b_flat
            r = torch.where(a_flat | b_flat, torch.zeros_like(r), r)
            close = (aw.mean(dim=1) - b_mean).abs() <= 0.1
            r = torch.where(both & close, torch.ones_like(r), r)
            out[lo: lo + p] = r.clamp(-1.0, 1.0).numpy()
            out_s[lo: lo + p] = s0.numpy()
            out_d[lo: lo + p] = d0.numpy()
    return out, out_s, out_d




def refine_correlation(a: np.ndarray, b: np.ndarray, scale: np.ndarray, shift: np.ndarray,
                       iterations: int = 8, margin_share: float = MARGIN / THUMB,
                       max_zoom: float = MAX_ZOOM) -> np.ndarray:
    """(P,) float32 Pearson correlation of ``b``'s central window and ``a`` warped by the
    scale (P,) and shift (P, 2) (in pixels of these images: (P, s, s) grey) after
    Gauss-Newton steps that maximise it (the enhanced correlation coefficient of
    Evangelidis and Psarakis, PAMI 2008, for a zoom and a shift). The zoom stays within
    1 +- ``max_zoom``."""
    import torch
    import torch.nn.functional as F

    ta = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))[:, None]
    tb = torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32))
    p, size = len(ta), ta.shape[-1]
    m = max(1, round(size * margin_share))
    w = size - 2 * m
    bz, b_flat = _standardise(tb[:, m: size - m, m: size - m].reshape(p, -1))
    s = torch.as_tensor(scale, dtype=torch.float32).clone()
    d = torch.as_tensor(shift, dtype=torch.float32).clone()
    centres = (torch.arange(w, dtype=torch.float32) + m + 0.5) - size / 2.0
    gy, gx = torch.meshgrid(centres, centres, indexing="ij")
    gx, gy = gx.reshape(-1), gy.reshape(-1)
    r = torch.zeros(p)
    with torch.no_grad():
        for it in range(iterations + 1):
            grid = _grids(s[:, None], d[:, None, :], size, m).reshape(p, w, w, 2)
            x = F.grid_sample(ta, grid, mode="bilinear", padding_mode="border",
                              align_corners=False)
            xz, a_flat, norm = _standardise_norm(x.reshape(p, -1))
            r = (xz * bz).sum(dim=1)
            if it == iterations:
                break
            # central differences, edges replicated (a 3-tap conv2d did the same 10x slower)
            px = F.pad(x, (1, 1, 0, 0), mode="replicate")
            py = F.pad(x, (0, 0, 1, 1), mode="replicate")
            ix = (0.5 * px[..., 2:] - 0.5 * px[..., :-2]).reshape(p, -1)
            iy = (0.5 * py[..., 2:, :] - 0.5 * py[..., :-2, :]).reshape(p, -1)
            # d x_sampled / d params, (p, 3, n): zoom (about the centre), shift x, shift y
            jac = torch.stack([ix * gx + iy * gy, ix, iy], dim=1)
            jac = (jac - jac.mean(dim=2, keepdim=True)) / norm[:, :, None]
            # maximise <xz(p), bz>: Gauss-Newton on || r * bz - xz(p) ||, the ECC step
            resid = bz - xz
            h = torch.bmm(jac, jac.transpose(1, 2)) + 1e-6 * torch.eye(3)
            g = torch.bmm(jac, resid[:, :, None])[..., 0]
            step = torch.linalg.solve(h, g)
            s = (s + step[:, 0]).clamp(1.0 - max_zoom, 1.0 + max_zoom)
            d = d + step[:, 1:].clamp(-1.0, 1.0)
        both = a_flat & b_flat
        r = torch.where(a_flat | b_flat, torch.zeros_like(r), r)
        r = torch.where(both, torch.ones_like(r), r)
    return r.clamp(-1.0, 1.0).numpy().astype(np.float32)
