"""``pixels``: a weight-free, offline encoder of low-level image features.

It describes what an image *looks like*, not what it *is*: use it for
near-duplicate detection, smoke runs and tests, not for semantic similarity.

Features of a 64x64 image, each block L2-normalised, then concatenated:

- a 16x16 grey thumbnail, mean-subtracted (invariant to brightness shifts and
  contrast scaling);
- 4x4 cells x 8 gradient orientations (a coarse HOG);
- a 4x4 thumbnail of the two chroma channels (weight 0.5; zero for grey images).

A block with nothing in it (the thumbnail of a flat image, the gradients of one) is not
normalised: normalising float rounding noise would give a random direction that differs
between devices (version 2; version 1 did that). An empty thumbnail is zero; empty
gradients are the uniform "no orientation" block, so flat images (blank placeholders of
any grey level) embed alike and group as near-duplicates, told apart by colour only.
"""

from __future__ import annotations

from typing import Any

import torch

from pairkit.encode.registry import PIXELS_SIZE, Preprocess

PIXELS_PREPROCESS = Preprocess(size=PIXELS_SIZE, interpolation="bilinear", resize="shortest")


class PixelFeatures(torch.nn.Module):
    """(B, 3, 64, 64) floats in [0, 1] -> (B, 432) features."""

    version = 2
    dim = 256 + 128 + 48
    # below these norms a block is rounding noise (one grey level anywhere gives a
    # thumbnail norm >= 2e-4 and a gradient block norm >= 6e-5; noise is <= ~5e-6)
    THUMB_FLOOR = 1e-5
    HOG_FLOOR = 2e-5

    def __init__(self) -> None:

        super().__init__()
        sobel = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
        self.register_buffer("kernels", torch.stack([sobel, sobel.t()]).unsqueeze(1))

    def forward(self, x: Any) -> Any:
        # Weight-free and cheap: always computed in float32, whatever autocast the
        # caller runs under (fp16/bf16 would only lose precision, and autocast turns
        # conv2d's output into half while the histogram below is float32).
        with torch.autocast(device_type=x.device.type, enabled=False):
            return self._features(x.float())

    def _features(self, x: Any) -> Any:
        import torch.nn.functional as F

        r, g, b = x[:, 0:1], x[:, 1:2], x[:, 2:3]
        grey = 0.299 * r + 0.587 * g + 0.114 * b
        thumb = F.adaptive_avg_pool2d(grey, 16).flatten(1)
        thumb = _normalize_or_zero(thumb - thumb.mean(dim=1, keepdim=True), self.THUMB_FLOOR)

        grad = F.conv2d(F.pad(grey, (1, 1, 1, 1), mode="replicate"), self.kernels)
        gx, gy = grad[:, 0], grad[:, 1]
        magnitude = torch.sqrt(gx * gx + gy * gy + 1e-12)
        angle = torch.remainder(torch.atan2(gy, gx), torch.pi)  # unsigned orientation
        bins = torch.clamp((angle / torch.pi * 8).long(), max=7)
        hist = torch.zeros(x.shape[0], 8, *gx.shape[1:], device=x.device, dtype=magnitude.dtype)
        hist.scatter_(1, bins.unsqueeze(1), magnitude.unsqueeze(1))
        hog = F.adaptive_avg_pool2d(hist, 4).flatten(1)
        hog = _normalize_or_zero(hog, self.HOG_FLOOR)
        empty = hog.abs().sum(dim=1, keepdim=True) == 0
        hog = torch.where(empty, torch.full_like(hog, hog.shape[1] ** -0.5), hog)

        chroma = torch.cat([r - grey, g - grey, b - grey], dim=1)
        colour = F.adaptive_avg_pool2d(chroma, 4).flatten(1) * 0.5

        return F.normalize(torch.cat([thumb, hog, colour], dim=1), dim=1)


def _normalize_or_zero(block: Any, floor: float) -> Any:
    """Rows of ``block`` scaled to unit norm; rows with a norm under ``floor`` are zero."""
    norm = block.norm(dim=1, keepdim=True)
    return torch.where(norm >= floor, block / norm.clamp_min(floor), torch.zeros_like(block))
