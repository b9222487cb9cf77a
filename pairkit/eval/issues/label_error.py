"""``label-error``: a label its neighbours disagree with.

Each source's label distribution is the similarity-weighted vote of its ``k`` nearest
other sources: ``p(c | i) = sum_j w_ij [y_j = c] / sum_j w_ij`` with ``w = max(s, 0)``
(a kNN classifier, out of sample since a source never votes for itself). Score: ``1 -
p(y_i | i)``, one minus cleanlab's *self-confidence* label quality. Flag, as confident
learning does (Northcutt, Jiang and Chuang, *Confident Learning: Estimating Uncertainty in
Dataset Labels*, JAIR 2021; cleanlab's ``find_label_issues``): per class ``c`` the
threshold ``t_c`` is the mean ``p(c | i)`` over the sources labeled ``c``; a source is
flagged when some other class reaches its threshold (``p(c | i) >= t_c``) and beats the
given label there: among the classes at their threshold, the most probable one is not
``y_i``. That class is the suggested label. A class with ``t_c = 0`` (none of its sources
has a neighbour of its class, e.g. a class of one source) is no evidence: it is never
reached, so never suggested.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pairkit.eval.data_issues import IssuesConfig, KnnGraph
    from pairkit.eval.issues import Detection

NAME = "label-error"
NEEDS_LABELS = True


def vote(graph: KnnGraph, labels: np.ndarray, n_classes: int) -> np.ndarray:
    """(N, C) float64 label distributions from the neighbours' weighted votes (rows with
    no labeled neighbour are 0)."""
    ids = graph.ids
    w = np.where(ids >= 0, np.maximum(graph.similarities, 0.0), 0.0)
    lab = np.where(ids >= 0, labels[np.maximum(ids, 0)], -1)
    w = np.where(lab >= 0, w, 0.0)
    probs = np.zeros((len(ids), n_classes))
    rows = np.repeat(np.arange(len(ids)), ids.shape[1])
    np.add.at(probs, (rows, np.maximum(lab, 0).ravel()), w.ravel())
    total = probs.sum(axis=1, keepdims=True)
    return np.divide(probs, total, out=np.zeros_like(probs), where=total > 0)


def detect(graph: KnnGraph, labels: np.ndarray | None, config: IssuesConfig) -> Detection:
    from pairkit.eval.issues import Detection

    n = len(graph.ids)
    if labels is None:
        raise ValueError("label-error needs labels")
    labels = np.asarray(labels, dtype=np.int64)
    n_classes = int(labels.max()) + 1 if (labels >= 0).any() else 0
    probs = vote(graph, labels, max(n_classes, 1))
    has = labels >= 0
    given = np.where(has, probs[np.arange(n), np.maximum(labels, 0)], np.nan)
    score = np.where(has, 1.0 - given, np.nan)
    # per-class thresholds: mean p(c | i) over the sources labeled c
    thresholds = np.full(max(n_classes, 1), np.inf)
    for c in range(n_classes):
        m = labels == c
        if m.any():
            thresholds[c] = probs[m, c].mean()
    # no vote is no evidence; nor is a class at threshold 0 (none of its sources has a
    # neighbour of its class: a class of one, which cannot vote for itself), which any
    # vote at all would reach
    above = (probs >= thresholds[None, :]) & (probs > 0) & (thresholds[None, :] > 0)
    masked = np.where(above, probs, -1.0)
    best = masked.argmax(axis=1)
    best_ok = masked.max(axis=1) >= 0
    flag = has & best_ok & (best != labels)
    suggested = np.where(flag, best, -1).astype(np.int64)
    reason = np.full(n, None, dtype=object)
    for i in np.flatnonzero(flag):
        reason[i] = (f"neighbours vote {probs[i, best[i]]:.2f} for another label "
                     f"(its class threshold {thresholds[best[i]]:.2f}), "
                     f"{given[i]:.2f} for the given one")
    return Detection(score, flag, reason, suggested)
