"""``label-error`` on sparse votes (hunt-r 3): the same scores, flags, suggestions and
reasons, bit for bit, as the dense N x classes implementation it replaced (kept below as
the reference), and memory that does not grow with the class count."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from pairkit.eval.data_issues import IssuesConfig, KnnGraph
from pairkit.eval.issues import label_error


def reference_vote(graph: KnnGraph, labels: np.ndarray, n_classes: int) -> np.ndarray:
    """The dense (N, C) float64 vote as pairkit computed it before hunt-r 3."""
    ids = graph.ids
    w = np.where(ids >= 0, np.maximum(graph.similarities, 0.0), 0.0)
    lab = np.where(ids >= 0, labels[np.maximum(ids, 0)], -1)
    w = np.where(lab >= 0, w, 0.0)
    probs = np.zeros((len(ids), n_classes))
    rows = np.repeat(np.arange(len(ids)), ids.shape[1])
    np.add.at(probs, (rows, np.maximum(lab, 0).ravel()), w.ravel())
    total = probs.sum(axis=1, keepdims=True)
    return np.divide(probs, total, out=np.zeros_like(probs), where=total > 0)


def reference_detect(graph: KnnGraph, labels: np.ndarray) -> tuple:
    """The dense detection as pairkit computed it before hunt-r 3."""
    n = len(graph.ids)
    labels = np.asarray(labels, dtype=np.int64)
    n_classes = int(labels.max()) + 1 if (labels >= 0).any() else 0
    probs = reference_vote(graph, labels, max(n_classes, 1))
    has = labels >= 0
    given = np.where(has, probs[np.arange(n), np.maximum(labels, 0)], np.nan)
    score = np.where(has, 1.0 - given, np.nan)
    thresholds = np.full(max(n_classes, 1), np.inf)
    for c in range(n_classes):
        m = labels == c
        if m.any():
            thresholds[c] = probs[m, c].mean()
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
    return score, flag, reason, suggested


def random_case(seed: int, n: int, k: int, n_classes: int, coarse: bool,
                ) -> tuple[KnnGraph, np.ndarray]:
    """A kNN graph with -1 padding and negative similarities, labels with unlabelled rows
    (-1), classes of one source and unused codes; ``coarse``: similarities from a few
    values, so votes, thresholds and the best classes tie."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n, (n, k))
    ids[rng.random((n, k)) < 0.1] = -1
    if coarse:
        sims = rng.choice(np.array([-0.5, 0.0, 0.25, 0.5, 1.0], np.float32), (n, k))
    else:
        sims = rng.uniform(-0.3, 1.0, (n, k)).astype(np.float32)
    sims = -np.sort(-sims, axis=1)
    # a few big classes (so thresholds are reached), many small ones, some of one source
    big = rng.integers(0, min(n_classes, 4), n)
    labels = np.where(rng.random(n) < 0.5, big, rng.integers(0, n_classes, n))
    labels[rng.random(n) < 0.1] = -1
    labels[: min(5, n)] = n_classes - 1 - np.arange(min(5, n)) % n_classes  # ones of a kind
    return KnnGraph(ids, sims), labels


@pytest.mark.parametrize("n_classes", [1, 2, 7, 8, 9, 64, 129, 300, 1000, 5000])
@pytest.mark.parametrize("coarse", [False, True])
def test_sparse_votes_equal_the_dense_reference(n_classes: int, coarse: bool) -> None:
    for seed in range(3):
        graph, labels = random_case(seed, 400, 10, n_classes, coarse)
        n_codes = int(labels.max()) + 1
        dense = reference_vote(graph, labels, n_codes)
        rows, cls, p = label_error.votes(graph, labels, n_codes)
        assert (np.diff(rows * n_codes + cls) > 0).all()       # sorted, one per cell
        got = np.zeros_like(dense)
        got[rows, cls] = p
        assert np.array_equal(got, dense)                       # bit for bit
        assert (p > 0).all() and np.array_equal(label_error.vote(graph, labels, n_codes), dense)
        det = label_error.detect(graph, labels, IssuesConfig())
        score, flag, reason, suggested = reference_detect(graph, labels)
        assert np.array_equal(det.score, score, equal_nan=True)
        assert np.array_equal(det.flag, flag)
        assert np.array_equal(det.suggested, suggested)
        assert det.reason.tolist() == reason.tolist()


def test_the_reference_cases_flag_and_tie() -> None:
    """The random cases above are not vacuous: rows are flagged, votes tie for the best
    class (the lower code wins, as argmax did) and sources sit exactly at a threshold."""
    graph, labels = random_case(1, 400, 10, 9, coarse=True)
    probs = reference_vote(graph, labels, 9)
    score, flag, _, suggested = reference_detect(graph, labels)
    assert flag.sum() > 10
    top = np.sort(probs, axis=1)[:, -2:]
    assert ((top[:, 0] == top[:, 1]) & (top[:, 1] > 0) & flag).any()
    assert np.isnan(score[labels < 0]).all() and (suggested[labels < 0] == -1).all()
    graph, labels = random_case(1, 400, 10, 64, coarse=True)
    probs = reference_vote(graph, labels, 64)
    t = np.array([probs[labels == c, c].mean() if (labels == c).any() else np.inf
                  for c in range(64)])
    assert ((probs == t) & (t > 0)).any()


@pytest.mark.parametrize("n_cols", [1, 5, 8, 13, 127, 128, 129, 300, 1031, 4099])
def test_dense_row_sums_follow_numpys_pairwise_order(n_cols: int) -> None:
    rng = np.random.default_rng(n_cols)
    dense = rng.random((300, n_cols)) * (rng.random((300, n_cols)) < 12 / n_cols)
    rows, cols = np.nonzero(dense)
    got = label_error.dense_row_sums(rows, cols, dense[rows, cols], 300, n_cols)
    assert np.array_equal(got, dense.sum(axis=1))


def test_memory_does_not_grow_with_the_class_count() -> None:
    """Failed before the fix: 1,000 sources over 20,000 classes made three dense 1,000 x
    20,000 float64 matrices (160 MB each). The votes are at most k per row."""
    graph, labels = random_case(0, 1000, 10, 20_000, coarse=False)
    tracemalloc.start()
    try:
        label_error.detect(graph, labels, IssuesConfig())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20
