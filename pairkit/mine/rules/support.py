"""``support``: the candidate is close to the anchor's support set, the views of its
source (false-negative cancellation, Huynh et al., WACV 2022): its similarity to
the support views, aggregated by max or mean, is >= a threshold and, with
``support_top``, among the anchor's highest by it.

The threshold defaults to the anchor's own weakest positive score: a candidate is
cancelled when it is at least as close to the anchor's views as they are to each
other. An absolute cosine (``support_threshold``) does not carry from one encoder
to another: 0.5, the earlier default, flagged half of all random pairs of an
ImageNet CNN's embeddings of Fashion-MNIST and made mining search every row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.mine.fn_context import FnContext, similarity_to_rows, source_views

NAME = "support"
REASON = "support"
SIMILARITY = True


def prepare(ctx: FnContext, config: Any) -> None:
    source_views(ctx)


def support_scores(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray,
                   config: Any) -> np.ndarray:
    """(n, k) float32: each candidate's aggregated similarity to the anchor's support
    views (the anchor itself too if ``support_include_anchor``); -inf for padding or
    an empty support set."""
    views = source_views(ctx)[ctx.sources[anchors]]
    if not config.support_include_anchor:
        views = np.where(views == anchors[:, None], -1, views)
    sim = similarity_to_rows(ctx.vectors, views, cand)  # (n, m, k)
    present = (views >= 0)[:, :, None]
    if config.support_aggregate == "max":
        agg = np.where(present, sim, -np.inf).max(axis=1)
    else:
        count = present.sum(axis=1)
        total = np.where(present, sim, 0.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            agg = np.where(count > 0, total / np.maximum(count, 1), -np.inf)
    return np.where(cand >= 0, agg, -np.inf).astype(np.float32)


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: Any, positives: Any) -> np.ndarray:
    """(n, k) bool: aggregated support similarity >= threshold and, if
    ``support_top`` > 0, among the anchor's ``support_top`` highest by it
    (ties at the cut are all kept in)."""
    agg = support_scores(ctx, anchors, cand, config)
    if config.support_threshold is None:
        thr = np.asarray(pos_scores, dtype=np.float32)[:, None]
        thr = np.where(np.isfinite(thr), thr, np.inf)  # no positive: nothing to compare with
    else:
        thr = np.float32(config.support_threshold)
    flags = (cand >= 0) & (agg >= thr)
    top = config.support_top
    if top and top < cand.shape[1]:
        kth = -np.partition(-agg, top - 1, axis=1)[:, top - 1 : top]
        flags &= agg >= kth
    return flags
