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


def _sequential_sums(keys: tuple[np.ndarray, ...], values: np.ndarray,
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Sum ``values`` over runs of equal ``keys`` (already sorted, last key the order within
    a run) one term after another from 0.0, as ``np.add.at`` or a short loop would: returns
    (index of each run's first item, run sums float64)."""
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    new_run = np.zeros(n, bool)
    new_run[0] = True
    for key in keys[:-1]:
        new_run[1:] |= key[1:] != key[:-1]
    first = np.flatnonzero(new_run)
    run = np.cumsum(new_run) - 1
    rank = np.arange(n) - first[run]
    sums = np.zeros(len(first))
    for r in range(int(rank.max()) + 1):
        at = rank == r
        sums[run[at]] += values[at]
    return first, sums


def _pairwise_tree(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The order in which numpy's pairwise summation adds the n entries of a float64 row
    (``pairwise_sum`` in numpy's loops: halves cut at multiples of 8 above 128 entries;
    below, 8 interleaved running sums added as a tree, then the tail one by one), as a tree
    whose nodes add their children one after another: nodes 0..n-1 are the entries;
    returns (parent, depth, order within the parent) per node, the root's parent -1."""
    parent: list[int] = list(range(n))
    order: list[int] = list(range(n))
    count = [n]

    def node(children: list[int]) -> int:
        k = count[0]
        count[0] += 1
        parent.append(-1)
        order.append(0)
        for i, c in enumerate(children):
            parent[c] = k
            order[c] = i
        return k

    def build(lo: int, m: int) -> int:
        if m > 128:
            half = m // 2
            half -= half % 8
            return node([build(lo, half), build(lo + half, m - half)])
        if m < 8:
            return node(list(range(lo, lo + m)))
        body = m - m % 8
        lanes = [node(list(range(lo + j, lo + body, 8))) for j in range(8)]
        pairs = [node(lanes[j:j + 2]) for j in range(0, 8, 2)]
        quads = [node(pairs[:2]), node(pairs[2:])]
        return node([node(quads)] + list(range(lo + body, lo + m)))

    root = build(0, n)
    parents = np.asarray(parent, np.int64)
    parents[root] = -1
    depth = np.zeros(len(parents), np.int64)
    # parents are created after their children: fill depths from the root down
    for k in range(len(parents) - 1, -1, -1):
        if parents[k] >= 0:
            depth[k] = depth[parents[k]] + 1
    return parents, depth, np.asarray(order, np.int64)


def dense_row_sums(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int,
                   n_cols: int) -> np.ndarray:
    """(n_rows,) float64: the sums ``dense.sum(axis=1)`` of the (n_rows, n_cols) matrix
    holding ``values`` at (``rows``, ``cols``) (distinct cells) and 0 elsewhere, bit for
    bit, without making it: numpy's pairwise order is followed, and a zero term changes
    no sum, so only the given cells are added."""
    out = np.zeros(n_rows)
    if len(values) == 0:
        return out
    parent, depth, order = _pairwise_tree(n_cols)
    row, at, val = rows.astype(np.int64), cols.astype(np.int64), values.astype(np.float64)
    for d in range(int(depth.max()), 0, -1):
        move = depth[at] == d
        if not move.any():
            continue
        r, a, v = row[move], at[move], val[move]
        sort = np.lexsort((order[a], parent[a], r))
        r, up, v = r[sort], parent[a][sort], v[sort]
        first, sums = _sequential_sums((r, up, order[a[sort]]), v)
        row = np.concatenate([row[~move], r[first]])
        at = np.concatenate([at[~move], up[first]])
        val = np.concatenate([val[~move], sums])
    out[row] = val
    return out


def votes(graph: KnnGraph, labels: np.ndarray, n_classes: int,
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The neighbours' weighted votes as sparse triples (row, class, p(class | row)),
    sorted by row then class, only the non-zero ones (at most k per row): float64 values
    equal bit for bit to the dense distribution (a row's p sums to 1; rows with no
    labeled neighbour have none). Memory O(N x k), whatever the class count."""
    ids = graph.ids
    n, k = ids.shape
    w = np.where(ids >= 0, np.maximum(graph.similarities, 0.0), 0.0)
    lab = np.where(ids >= 0, labels[np.maximum(ids, 0)], -1)
    w = np.where(lab >= 0, w, 0.0).ravel()
    keep = w != 0
    rows = np.repeat(np.arange(n, dtype=np.int64), k)[keep]
    cls = lab.ravel()[keep].astype(np.int64)
    col = np.tile(np.arange(k, dtype=np.int64), n)[keep]
    sort = np.lexsort((col, cls, rows))
    rows, cls, col = rows[sort], cls[sort], col[sort]
    # one cell per (row, class): its votes added in neighbour order (as np.add.at does)
    first, cell = _sequential_sums((rows, cls, col), w[keep][sort].astype(np.float64))
    rows, cls = rows[first], cls[first]
    total = dense_row_sums(rows, cls, cell, n, n_classes)
    return rows, cls, cell / total[rows]


def vote(graph: KnnGraph, labels: np.ndarray, n_classes: int) -> np.ndarray:
    """(N, C) float64 label distributions from the neighbours' weighted votes (rows with
    no labeled neighbour are 0). Dense: for small inputs; ``detect`` uses ``votes``."""
    rows, cls, p = votes(graph, labels, n_classes)
    probs = np.zeros((len(graph.ids), n_classes))
    probs[rows, cls] = p
    return probs


def detect(graph: KnnGraph, labels: np.ndarray | None, config: IssuesConfig) -> Detection:
    from pairkit.eval.issues import Detection

    n = len(graph.ids)
    if labels is None:
        raise ValueError("label-error needs labels")
    labels = np.asarray(labels, dtype=np.int64)
    n_classes = int(labels.max()) + 1 if (labels >= 0).any() else 0
    rows, cls, p = votes(graph, labels, max(n_classes, 1))
    has = labels >= 0
    own = cls == labels[rows]
    p_given = np.zeros(n)
    p_given[rows[own]] = p[own]
    given = np.where(has, p_given, np.nan)
    score = np.where(has, 1.0 - given, np.nan)
    # per-class thresholds: mean p(c | i) over the sources labeled c (each class's values
    # in row order, then .mean(), as on the dense column)
    thresholds = np.full(max(n_classes, 1), np.inf)
    members = np.argsort(np.where(has, labels, n_classes), kind="stable")[:int(has.sum())]
    sizes = np.bincount(labels[has], minlength=n_classes)
    ends = np.cumsum(sizes)
    for c in np.flatnonzero(sizes):
        thresholds[c] = p_given[members[ends[c] - sizes[c]:ends[c]]].mean()
    # no vote is no evidence; nor is a class at threshold 0 (none of its sources has a
    # neighbour of its class: a class of one, which cannot vote for itself), which any
    # vote at all would reach
    t = thresholds[cls]
    above = (p >= t) & (p > 0) & (t > 0)
    r, c, pa = rows[above], cls[above], p[above]
    # per row the most probable class at its threshold, the lowest code on a tie
    sort = np.lexsort((c, -pa, r))
    r, c, pa = r[sort], c[sort], pa[sort]
    head = np.ones(len(r), bool)
    head[1:] = r[1:] != r[:-1]
    best = np.zeros(n, np.int64)
    best_p = np.zeros(n)
    best_ok = np.zeros(n, bool)
    best[r[head]], best_p[r[head]], best_ok[r[head]] = c[head], pa[head], True
    flag = has & best_ok & (best != labels)
    suggested = np.where(flag, best, -1).astype(np.int64)
    reason = np.full(n, None, dtype=object)
    for i in np.flatnonzero(flag):
        reason[i] = (f"neighbours vote {best_p[i]:.2f} for another label "
                     f"(its class threshold {thresholds[best[i]]:.2f}), "
                     f"{given[i]:.2f} for the given one")
    return Detection(score, flag, reason, suggested)
