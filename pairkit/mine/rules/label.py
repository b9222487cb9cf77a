"""``label``: the candidate has the anchor's (non-missing) label."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pairkit.mine.fn_context import FnContext, label_codes

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig

NAME = "label"
REASON = "label"
SIMILARITY = False


def prepare(ctx: FnContext, config: FalseNegativeConfig) -> None:
    label_codes(ctx)


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: FalseNegativeConfig,
         positives: np.ndarray | list[np.ndarray] | None) -> np.ndarray:
    """(n, k) bool: candidate and anchor carry the same label."""
    codes = label_codes(ctx)
    if codes is None:
        return np.zeros(cand.shape, dtype=bool)
    a = codes[anchors][:, None]
    c = codes[np.maximum(cand, 0)]
    return (cand >= 0) & (a >= 0) & (a == c)
