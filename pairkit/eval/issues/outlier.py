"""``outlier``: a source far from its nearest neighbours.

Score: the mean cosine distance ``1 - s`` to the ``k`` nearest other sources (the
average-kNN-distance outlier score of Angiulli and Pizzuti, *Fast outlier detection in
high dimensional spaces*, PKDD 2002; cleanlab's ``Datalab`` scores out-of-distribution
examples from the same mean kNN distance, fastdup's outliers are the images whose
nearest neighbour is far). Flag: a robust z-score above ``outlier_z`` (3.5 by default):
``(score - median) / (1.4826 * MAD)``, the modified z-score of Iglewicz and Hoaglin
(*How to detect and handle outliers*, 1993), so the flag adapts to each store's spread
instead of a fixed distance. The scale is at least the store dtype's rounding of a cosine
(``IssuesConfig.resolution``: 0.002 on float16 stores, as ``dedup`` reads "identical"), so
rounding noise is never an outlier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pairkit.core.shown import shown, shown_above

if TYPE_CHECKING:
    from pairkit.eval.data_issues import IssuesConfig, KnnGraph
    from pairkit.eval.issues import Detection

NAME = "outlier"
NEEDS_LABELS = False


def robust_z(score: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """(N,) modified z-scores ``(x - median) / (1.4826 * MAD)``; where more than half the
    scores are equal (MAD 0) the mean absolute deviation stands in, ``1.2533 * meanAD``
    (its scale at the normal); 0 when all are equal. The scale is at least ``floor``:
    spreads below the store's rounding are no spread (a float16 store of near-identical
    rows had a scale of 2e-5 from rounding alone and flagged "mean distance 0.000")."""
    if not len(score):
        return np.zeros(0)
    med = float(np.median(score))
    dev = np.abs(score - med)
    scale = float(np.median(dev)) * 1.4826
    if scale <= 0:
        scale = float(dev.mean()) * 1.253314
    scale = max(scale, floor)
    if scale <= 0:
        return np.zeros(len(score))
    return (score - med) / scale


def detect(graph: KnnGraph, labels: np.ndarray | None, config: IssuesConfig) -> Detection:
    from pairkit.eval.issues import Detection

    dist = graph.distances  # (N, k), +inf padding
    valid = np.isfinite(dist)
    count = valid.sum(axis=1)
    score = np.where(count > 0, np.where(valid, dist, 0.0).sum(axis=1) / np.maximum(count, 1),
                     np.inf).astype(np.float64)
    finite = np.isfinite(score)
    z = np.full(len(score), np.inf)
    z[finite] = robust_z(score[finite], floor=config.resolution)
    flag = z > config.outlier_z
    reason = np.full(len(score), None, dtype=object)
    threshold = shown(config.outlier_z)
    for i in np.flatnonzero(flag):
        reason[i] = (f"mean distance {score[i]:.3f} to its {int(count[i])} nearest sources, "
                     f"robust z {shown_above(z[i], config.outlier_z)} > {threshold}"
                     if finite[i] else "no neighbours")
    return Detection(score, flag, reason, np.full(len(score), -1, dtype=np.int64))

