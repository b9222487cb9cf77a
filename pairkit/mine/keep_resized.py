"""dedup ``--keep best`` between resized copies of one image: the pair test that tells a
shrunk copy from its original, and an enlarged copy from its original, and the group
rewrite when it changes the kept copy.

The per-file signals of :mod:`pairkit.mine.keep_best` cannot tell which size of a resized
image came first (a lossless resize of a smooth image holds the same picture at either
size). Two files of one group can: with ``big`` the one with more pixels,

- ``e_down``: ``big`` shrunk to ``small``'s size against ``small`` (the least over PIL's
  box, bilinear, bicubic and Lanczos filters), over ``small``'s variance: below
  :data:`RESIZE_LOSS` the two are a resize of each other (same aspect, no other edit);
- ``e_up``: ``small`` enlarged to ``big``'s size against ``big`` (bilinear, bicubic,
  Lanczos), over ``big``'s variance: what ``big`` holds that ``small`` lacks.

An enlarged copy holds nothing its original lacks: ``e_up`` is of the order of ``e_down``
(the round trip's rounding; ratio 0.0-1.6 on the planted copies of
tests/benchmarks/dedup_keep.py). A shrunk copy lost detail its original holds: ``e_up`` is
several times ``e_down`` (3.8-4,500). Above :data:`DETAIL_RATIO` the larger file is kept
(resolution first), below it the smaller (the larger is an enlargement of it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

RESIZE_LOSS = 0.05  # e_down above this: not a resize of each other (cropped, edited)
DETAIL_RATIO = 2.5  # e_up / e_down above this: the larger file holds detail the smaller lacks
MIN_PIXEL_RATIO = 1.1  # pixel counts closer than this are not a resize pair
MAX_ASPECT_CHANGE = 0.02
FLAT = 1e-6  # grey variance below this: a flat image, no detail either way
MAX_SIDE = 1024  # larger images are not compared (cost bound): the per-file rule decides
REASON_SHRUNK = "more pixels: the other copy is a shrunk copy of this one"
REASON_ENLARGED = "native size: the other copy is an enlargement of this one"


def _grey(path: Path | BinaryIO) -> np.ndarray | None:
    """The image's grey levels as shown (its EXIF orientation applied, as embed reads it:
    a camera original stored sideways is compared upright with its copies). ``path``: a
    file, or a file object of a tar member's or dataset row's bytes."""
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as im:
            if max(im.size) > MAX_SIDE:
                return None
            shown = ImageOps.exif_transpose(im) or im
            rgb = np.asarray(shown.convert("RGB"), dtype=np.float64)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    return (rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114) / 255.0


def _loss(got: np.ndarray, want: np.ndarray) -> float:
    """Mean squared difference over ``want``'s variance, 2 px of border left out (resampled
    from fewer pixels)."""
    m = 2 if min(want.shape) > 8 else 0
    d = (got - want)[m:want.shape[0] - m, m:want.shape[1] - m]
    inner = want[m:want.shape[0] - m, m:want.shape[1] - m]
    return float((d ** 2).mean()) / max(float(inner.var()), 1e-8)


def _resized(grey: np.ndarray, size: tuple[int, int], kind: str) -> np.ndarray:
    from PIL import Image

    filters = {"box": Image.Resampling.BOX, "bilinear": Image.Resampling.BILINEAR,
               "bicubic": Image.Resampling.BICUBIC, "lanczos": Image.Resampling.LANCZOS}
    img = Image.fromarray(grey.astype(np.float32), "F").resize(size, filters[kind])
    return np.asarray(img, dtype=np.float64)


def resize_losses(big: np.ndarray, small: np.ndarray) -> tuple[float, float]:
    """``(e_down, e_up)`` of two grey images (module doc)."""
    (hb, wb), (hs, ws) = big.shape, small.shape
    e_down = min(_loss(_resized(big, (ws, hs), k), small)
                 for k in ("box", "bilinear", "bicubic", "lanczos"))
    e_up = min(_loss(_resized(small, (wb, hb), k), big)
               for k in ("bilinear", "bicubic", "lanczos"))
    return e_down, e_up


def resize_verdict(big: Path | BinaryIO, small: Path | BinaryIO) -> bool | None:
    """True when ``small`` is a shrunk copy of ``big`` (``big`` holds detail it lacks),
    False when ``big`` is an enlarged copy of ``small``, None when the two files are not a
    resize of each other (pixel counts within :data:`MIN_PIXEL_RATIO`, another aspect, other
    edits, unreadable, larger than :data:`MAX_SIDE`)."""
    gb, gs = _grey(big), _grey(small)
    if gb is None or gs is None or min(*gs.shape) < 8:
        return None
    (hb, wb), (hs, ws) = gb.shape, gs.shape
    if hb * wb < MIN_PIXEL_RATIO * hs * ws or gb.var() < FLAT:
        return None  # not resized, or no detail to tell by (the per-file rule decides)
    if abs((wb / hb) / (ws / hs) - 1) > MAX_ASPECT_CHANGE:
        return None
    e_down, e_up = resize_losses(gb, gs)
    if e_down > RESIZE_LOSS:
        return None
    return e_up > DETAIL_RATIO * max(e_down, 1e-9)


def resized_keeper(kept: int, others: list[int], pixels: Callable[[int], float | None],
                   file_of: Callable[[int], Path | BinaryIO | None]
                   ) -> tuple[int, str | None]:
    """The member of a group to keep once resized copies are compared with the kept one:
    ``(kept, None)`` when no comparison changes it, else ``(new id, reason)``. ``others``
    in the per-file rule's order (best first); ``pixels(id)`` (None: unreadable) and
    ``file_of(id)`` (None: outside the image root or unreadable; a file object, a new one
    each call, for a tar member or dataset row) per member."""
    reason = None
    seen = {kept}  # never switch back: the order is not circular
    changed = True
    while changed:
        changed = False
        for other in others:
            if other in seen:
                continue
            pk, po, fk, fo = pixels(kept), pixels(other), file_of(kept), file_of(other)
            if pk is None or po is None or fk is None or fo is None or pk == po:
                continue
            if po > pk and resize_verdict(fo, fk) is True:  # kept is a shrunk copy
                kept, reason = other, REASON_SHRUNK
            elif pk > po and resize_verdict(fk, fo) is False:  # kept is an enlargement
                kept, reason = other, REASON_ENLARGED
            else:
                continue
            seen.add(kept)
            changed = True
            break
    return kept, reason


def rekeep_groups(table: Any, vectors: np.ndarray, file_sha256: np.ndarray | None,
                  new_keeper: dict[int, int]) -> Any:
    """``table`` (columns group, id, keep, similarity, match, ...) with the kept row of
    each group in ``new_keeper`` (group -> id) changed: similarity and match recomputed
    against the new kept row, groups renumbered in their kept ids' order, rows ordered kept
    first then by id (as :func:`pairkit.mine.near_duplicates.find_near_duplicates`)."""
    if not new_keeper:
        return table
    table = table.copy()
    ids = table["id"].to_numpy()
    groups = table["group"].to_numpy()
    keep = table["keep"].to_numpy().copy()
    sims = table["similarity"].to_numpy().copy()
    match = table["match"].to_numpy(dtype=object).copy()
    for g, new in new_keeper.items():
        rows = np.flatnonzero(groups == g)
        keep[rows] = ids[rows] == new
        s = np.clip((vectors[ids[rows]] @ vectors[new]).astype(np.float32), -1.0, 1.0)
        same = np.zeros(len(rows), dtype=bool)
        if file_sha256 is not None and file_sha256[new] is not None:
            same = np.array([file_sha256[i] == file_sha256[new] for i in ids[rows]])
        s[keep[rows] | same] = np.float32(1.0)
        sims[rows] = s
        match[rows] = np.where(keep[rows], "keep", np.where(same, "exact", "near"))
    table["keep"], table["similarity"], table["match"] = keep, sims, match
    kept_id = {int(g): int(i) for g, i in zip(groups[keep], ids[keep], strict=True)}
    order = sorted(kept_id, key=lambda g: kept_id[g])
    renumber = {g: n for n, g in enumerate(order)}
    table["group"] = np.array([renumber[int(g)] for g in groups], dtype=np.int64)
    table = table.assign(_rest=~table["keep"]).sort_values(
        ["group", "_rest", "id"], kind="stable").drop(columns="_rest")
    return table.reset_index(drop=True)
