"""``margin``: the candidate scores within a margin of the anchor's positive
(positive-aware mining, "TopK-PercPos" of NV-Retriever, Moreira et al. 2024):
flag ``score > pos - (1 - margin) * |pos|`` (= ``margin * pos`` when pos > 0)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pairkit.mine.fn_context import FnContext

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig

NAME = "margin"
REASON = "margin"
SIMILARITY = True


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: FalseNegativeConfig,
         positives: np.ndarray | list[np.ndarray] | None) -> np.ndarray:
    """(n, k) bool. The threshold stays below the positive score when it is <= 0;
    anchors with a non-finite positive score (no positive) flag nothing."""
    pos = np.asarray(pos_scores, dtype=np.float64)[:, None]
    finite = np.isfinite(pos)
    # compared in float32, the scores' precision, so a score equal to the
    # threshold (as the user would compute it) counts as a tie, not above it
    with np.errstate(invalid="ignore"):
        thr = np.where(finite, pos - (1.0 - config.margin) * np.abs(pos), np.inf)
    thr = thr.astype(np.float32)
    return (cand >= 0) & finite & (np.asarray(scores, dtype=np.float32) > thr)
