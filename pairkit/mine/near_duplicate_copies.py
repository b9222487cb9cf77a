"""Known copies of a store's own images, made in memory, for calibrating the
near-duplicate decision: the edits pairkit calls near-duplicates, at random strengths.

Sides are relative to the image, so a copy of a 28 px image and of a 4000 px photo get
the same share of change. The edits (one each, as copy-detection benchmarks plant them:
Douze et al., *The 2021 Image Similarity Dataset and Challenge*, 2021):

- ``reencode``: JPEG at quality 40-85;
- ``resize``: down to 0.55-0.8 or up to 1.3-1.8 of the side (bilinear);
- ``shift``: the content moved by 1-2% of the side (at least one pixel), edges repeated;
- ``crop``: 2-5% of the side cut off the borders (the copy is smaller);
- ``brightness``: +-5-10%.
"""

from __future__ import annotations

import io

import numpy as np

EDITS = ("reencode", "resize", "shift", "crop", "brightness")


def edited_copy(img: object, edit: str, rng: np.random.Generator) -> object:
    """One edited copy of a PIL RGB image (a new PIL image)."""
    from PIL import Image, ImageEnhance

    w, h = img.size  # type: ignore[attr-defined]
    if edit == "reencode":
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=int(rng.integers(40, 86)))  # type: ignore[attr-defined]
        buf.seek(0)
        return Image.open(buf).convert("RGB")
    if edit == "resize":
        s = rng.uniform(0.55, 0.8) if rng.random() < 0.6 else rng.uniform(1.3, 1.8)
        return img.resize((max(8, round(w * s)), max(8, round(h * s))),  # type: ignore[attr-defined]
                          Image.Resampling.BILINEAR)
    if edit == "shift":
        a = np.asarray(img)
        dx, dy = (max(1, round(side * rng.uniform(0.01, 0.02))) * int(rng.choice([-1, 1]))
                  for side in (w, h))
        a = np.take(a, np.clip(np.arange(h) - dy, 0, h - 1), axis=0)
        a = np.take(a, np.clip(np.arange(w) - dx, 0, w - 1), axis=1)
        return Image.fromarray(a)
    if edit == "crop":  # at least a pixel off each side that has one to spare
        cut_w = min(w - 1, max(1, round(w * rng.uniform(0.02, 0.05))))
        cut_h = min(h - 1, max(1, round(h * rng.uniform(0.02, 0.05))))
        left, top = int(rng.integers(0, cut_w + 1)), int(rng.integers(0, cut_h + 1))
        return img.crop((left, top, w - (cut_w - left), h - (cut_h - top)))  # type: ignore[attr-defined]
    if edit == "brightness":
        f = 1.0 + float(rng.choice([-1.0, 1.0])) * rng.uniform(0.05, 0.10)
        return ImageEnhance.Brightness(img).enhance(f)
    raise ValueError(f"unknown edit {edit!r}; one of {', '.join(EDITS)}")
