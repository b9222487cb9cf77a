"""``near-duplicate``: the candidate is in the near-duplicate group of the anchor or
of one of its positives (``pairkit dedup``'s groups: re-encodes, resizes, small
edits, exact copies by file hash)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pairkit.mine.fn_context import (
    FnContext,
    any_similar,
    near_duplicate_group_ids,
    near_duplicate_threshold,
    other_views,
    source_rows,
)

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig

NAME = "near-duplicate"
REASON = "near_duplicate"
SIMILARITY = False


def prepare(ctx: FnContext, config: FalseNegativeConfig) -> None:
    source_rows(ctx)


def positive_rows(ctx: FnContext, anchors: np.ndarray,
                  positives: np.ndarray | list[np.ndarray] | None) -> np.ndarray:
    """(n, p) positives per anchor, -1 padded; ``positives``: that array already, or one
    array per anchor; without: the other views of the anchor's source (the instance
    relation)."""
    if positives is None:
        return other_views(ctx, anchors)
    if isinstance(positives, np.ndarray) and positives.ndim == 2:
        if len(positives) != len(anchors):
            from pairkit.errors import UsageError

            raise UsageError(f"positives has {len(positives)} rows, anchors {len(anchors)}")
        return positives.astype(np.int64, copy=False)
    if len(positives) != len(anchors):
        from pairkit.errors import UsageError

        raise UsageError(f"positives has {len(positives)} rows, anchors {len(anchors)}")
    width = max([len(p) for p in positives] + [1])
    out = np.full((len(anchors), width), -1, dtype=np.int64)
    for i, p in enumerate(positives):
        out[i, : len(p)] = p
    return out


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: FalseNegativeConfig,
         positives: np.ndarray | list[np.ndarray] | None) -> np.ndarray:
    """(n, k) bool: same near-duplicate group as the anchor or a positive. Without
    groups: cosine to the anchor or a positive >= the dedup threshold."""
    valid = cand >= 0
    pos = positive_rows(ctx, anchors, positives)
    groups = near_duplicate_group_ids(ctx, config)
    if groups is not None:
        gc = groups[np.maximum(cand, 0)]
        ga = groups[anchors][:, None]
        flags = (ga >= 0) & (ga == gc)
        gp = np.where(pos >= 0, groups[np.maximum(pos, 0)], -1)  # (n, p)
        for j in range(gp.shape[1]):
            g = gp[:, j : j + 1]
            flags |= (g >= 0) & (g == gc)
        return valid & flags
    thr = near_duplicate_threshold(config, ctx.dtype)
    flags = scores >= thr
    if pos.shape[1] and (pos >= 0).any():
        flags |= any_similar(ctx.vectors, pos, cand, thr)
    return valid & flags
