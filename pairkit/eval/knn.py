"""Weighted kNN classification on neighbour lists.

Score of class c for a query (Wu et al. 2018, "Unsupervised Feature Learning via
Non-Parametric Instance Discrimination"; the protocol of DINO, Caron et al. 2021)::

    score_c = sum over the k nearest references j with label c of exp(sim_j / T)

Classes are ranked by score; equal scores are broken by the smaller class code
(deterministic; codes number the labels in order of first appearance). Each class's
weights are summed on their own, largest first, so classes with the same neighbour
similarities have bit-identical scores and the tie rule holds exactly. Only classes
that occur among the k neighbours are ranked: a class with no neighbour never enters the
top 5, and a query whose class is absent from the references is always wrong.
"""

from __future__ import annotations

import numpy as np

WEIGHTINGS = ("exp", "uniform")


def knn_rank_classes(
    neighbour_labels: np.ndarray,
    neighbour_scores: np.ndarray,
    k: int,
    temperature: float = 0.07,
    *,
    weighting: str = "exp",
    top: int = 5,
) -> tuple[np.ndarray, np.ndarray]:
    """Rank classes for each query from its first ``k`` neighbours.

    ``neighbour_labels`` int64 (nq, K >= k): class code of each neighbour, -1 for a
    missing neighbour or an unlabeled one (ignored); ``neighbour_scores`` (nq, K):
    similarities, best first. ``weighting`` "exp" uses exp(sim/T), "uniform" 1.

    Returns ``(classes, scores)``, both (nq, top): class codes best first (-1 where
    fewer classes occur) and their scores as float64. With "exp" the scores of a row
    are scaled by exp(-max_sim/T) of that row (avoids overflow; the ranking and the
    ratios between classes are the formula's).
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    labels = np.asarray(neighbour_labels[:, :k], dtype=np.int64)
    sims = np.asarray(neighbour_scores[:, :k], dtype=np.float64)
    nq = len(labels)
    valid = labels >= 0
    if weighting == "exp":
        shifted = np.where(valid, sims, -np.inf)
        row_max = shifted.max(axis=1, initial=-np.inf, keepdims=True)
        row_max = np.where(np.isfinite(row_max), row_max, 0.0)
        weights = np.where(valid, np.exp((np.where(valid, sims, 0.0) - row_max) / temperature),
                           0.0)
    else:
        weights = valid.astype(np.float64)
    # Segment sums per (row, class): sort each row by class code and, within a class, by
    # weight descending, then sum each run on its own (np.add.reduceat). A class's score
    # is then a function of its multiset of weights only: two classes with the same
    # neighbour similarities score the same to the bit and the tie rule decides (a
    # difference of one running sum carried the rounding of the classes before it).
    sort_key = np.where(valid, labels, np.iinfo(np.int64).max)
    order = np.lexsort((-weights, sort_key), axis=1)
    sl = np.take_along_axis(sort_key, order, axis=1)
    sw = np.take_along_axis(weights, order, axis=1)
    is_end = np.ones_like(sl, dtype=bool)
    is_end[:, :-1] = sl[:, 1:] != sl[:, :-1]
    is_start = np.ones_like(sl, dtype=bool)
    is_start[:, 1:] = sl[:, 1:] != sl[:, :-1]
    run_sum = np.zeros_like(sw)
    if sw.size:
        starts = np.flatnonzero(is_start.ravel())  # every row starts a run: none spans two
        run_sum.ravel()[np.flatnonzero(is_end.ravel())] = np.add.reduceat(sw.ravel(), starts)
    usable = is_end & (sl != np.iinfo(np.int64).max)
    class_score = np.where(usable, run_sum, -np.inf)
    # rank: score descending; ties keep class-code ascending order (stable sort)
    rank = np.argsort(-class_score, axis=1, kind="stable")[:, :top]
    out_scores = np.take_along_axis(class_score, rank, axis=1)
    out_classes = np.take_along_axis(sl, rank, axis=1)
    missing = ~np.isfinite(out_scores)
    out_classes = np.where(missing, -1, out_classes)
    out_scores = np.where(missing, 0.0, out_scores)
    if out_classes.shape[1] < top:
        pad = top - out_classes.shape[1]
        out_classes = np.pad(out_classes, ((0, 0), (0, pad)), constant_values=-1)
        out_scores = np.pad(out_scores, ((0, 0), (0, pad)), constant_values=0.0)
    return out_classes.reshape(nq, top), out_scores.reshape(nq, top)


def knn_hits(ranked_classes: np.ndarray, true_labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-query top-1 and top-5 hits (bool (nq,), bool (nq,)) from ranked classes (nq, >=5)."""
    true = np.asarray(true_labels, dtype=np.int64)[:, None]
    match = (ranked_classes == true) & (true >= 0)
    return match[:, 0], match[:, :5].any(axis=1)
