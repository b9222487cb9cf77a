"""Retrieval metrics against pytorch-metric-learning and a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.eval.neighbours import Exclusion, search_excluding
from pairkit.eval.retrieval import relevant_counts, retrieval_scores
from pairkit.index.search import flat_index

KEYS = ("precision_at_1", "r_precision", "map_at_r")


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _ours(q, ql, r, rl, excl, recall_ks=(1, 5, 10), max_r=1000, k=None):
    counts = relevant_counts(ql, rl, excl)
    k = k or min(len(r), max(max(recall_ks), min(int(counts.max()), max_r)))
    sums = dict.fromkeys(KEYS, 0.0) | {f"recall_at_{x}": 0.0 for x in recall_ks}
    n = 0
    for start, _s, ids in search_excluding(q, flat_index(r), len(r), k, excl, block_rows=16):
        labels = np.where(ids >= 0, rl[np.maximum(ids, 0)], -1)
        out = retrieval_scores(labels, ql[start : start + len(ids)],
                               counts[start : start + len(ids)], recall_ks, max_r)
        v = out["valid"]
        n += int(v.sum())
        for key in sums:
            sums[key] += float(out[key][v].sum())
    return {key: val / n for key, val in sums.items()}


def _pml(q, ql, r, rl, ref_includes_query, k="max_bin_count"):
    torch = pytest.importorskip("torch")
    acc = pytest.importorskip("pytorch_metric_learning.utils.accuracy_calculator")
    calc = acc.AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k=k, device=torch.device("cpu"))
    res = calc.get_accuracy(torch.from_numpy(q), torch.from_numpy(ql), torch.from_numpy(r),
                            torch.from_numpy(rl), ref_includes_query=ref_includes_query)
    return {"precision_at_1": res["precision_at_1"], "r_precision": res["r_precision"],
            "map_at_r": res["mean_average_precision_at_r"]}


def _data(seed: int, nq: int, nr: int, classes: int, d: int = 8):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d))
    ql = rng.integers(0, classes, size=nq)
    rl = rng.integers(0, classes, size=nr)
    q = centres[ql] + 1.2 * rng.normal(size=(nq, d))
    r = centres[rl] + 1.2 * rng.normal(size=(nr, d))
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    r = (r / np.linalg.norm(r, axis=1, keepdims=True)).astype(np.float32)
    return q, ql.astype(np.int64), r, rl.astype(np.int64)


def test_separate_queries_match_pml() -> None:
    q, ql, r, rl = _data(0, 150, 400, 6)
    ours = _ours(q, ql, r, rl, None)
    ref = _pml(q, ql, r, rl, ref_includes_query=False)
    for key in KEYS:
        assert ours[key] == pytest.approx(ref[key], abs=1e-9), key


def test_query_in_references_matches_pml() -> None:
    q, ql, _, _ = _data(1, 300, 1, 7)
    ours = _ours(q, ql, q, ql, Exclusion(self_rows=np.arange(len(q))))
    ref = _pml(q, ql, q, ql, ref_includes_query=True)
    for key in KEYS:
        assert ours[key] == pytest.approx(ref[key], abs=1e-9), key


def test_capped_r_gives_lower_bounds() -> None:
    q, ql, r, rl = _data(2, 100, 600, 3)  # R ~ 200 per query
    exact = _ours(q, ql, r, rl, None)
    capped = _ours(q, ql, r, rl, None, max_r=25, k=25)
    ref = _pml(q, ql, r, rl, ref_includes_query=False, k=25)
    # AccuracyCalculator with k=25 < R computes the same lower bound of MAP@R
    assert capped["map_at_r"] == pytest.approx(ref["map_at_r"], abs=1e-9)
    assert capped["precision_at_1"] == pytest.approx(exact["precision_at_1"])
    assert capped["map_at_r"] < exact["map_at_r"]
    assert capped["r_precision"] < exact["r_precision"]
    # R-precision lower bound: hits among the first 25 over the full R
    sims = q @ r.T
    lb = np.mean([(rl[np.argsort(-sims[i])[:25]] == ql[i]).sum() / (rl == ql[i]).sum()
                  for i in range(len(q))])
    assert capped["r_precision"] == pytest.approx(lb)


def test_capped_only_when_r_exceeds_the_ranks_looked_at() -> None:
    """max_r 3, six neighbour columns, the same list (relevant at ranks 1, 3, 4) twice:
    R = 3 = max_r is looked at whole (exact, not capped): R-precision 2/3, MAP@R
    (1 + 2/3) / 3; R = 4 is capped (lower bounds over R = 4): 2/4 and (1 + 2/3) / 4."""
    labels = np.array([[1, 0, 1, 1, 0, 0]] * 2)
    out = retrieval_scores(labels, np.array([1, 1]), np.array([3, 4]), (1,), max_r=3)
    assert out["capped"].tolist() == [False, True]
    np.testing.assert_allclose(out["r_precision"], [2 / 3, 2 / 4])
    np.testing.assert_allclose(out["map_at_r"], [(1 + 2 / 3) / 3, (1 + 2 / 3) / 4])
    # the ranks looked at are also capped by the columns given: R = 6 with 6 is exact
    out = retrieval_scores(labels, np.array([1, 1]), np.array([6, 7]), (1,), max_r=100)
    assert out["capped"].tolist() == [False, True]


def test_same_source_exclusion_and_recall_match_brute_force() -> None:
    q, ql, _, _ = _data(3, 200, 1, 5)
    groups = np.arange(200) // 2  # pairs of views
    ql = ql.copy()
    ql[1::2] = ql[::2]  # views of one source share the label
    excl = Exclusion(np.arange(200), groups, groups)
    ours = _ours(q, ql, q, ql, excl, recall_ks=(1, 3, 8))
    sims = q @ q.T
    p1 = rp = mapr = 0.0
    rec = {1: 0.0, 3: 0.0, 8: 0.0}
    for i in range(200):
        allowed = np.flatnonzero(groups != groups[i])
        order = allowed[np.argsort(-sims[i, allowed], kind="stable")]
        rel = ql[order] == ql[i]
        big_r = int(rel.sum())
        p1 += rel[0]
        rp += rel[:big_r].sum() / big_r
        prec = np.cumsum(rel[:big_r]) / np.arange(1, big_r + 1)
        mapr += (prec * rel[:big_r]).sum() / big_r
        for k in rec:
            rec[k] += rel[:k].any()
    assert ours["precision_at_1"] == pytest.approx(p1 / 200)
    assert ours["r_precision"] == pytest.approx(rp / 200)
    assert ours["map_at_r"] == pytest.approx(mapr / 200)
    for k in rec:
        assert ours[f"recall_at_{k}"] == pytest.approx(rec[k] / 200)


def test_relevant_counts_and_lone_queries() -> None:
    ql = np.array([0, 1, 2, -1])
    rl = np.array([0, 0, 1, 1, 1])
    assert relevant_counts(ql, rl).tolist() == [2, 3, 0, 0]
    # query 0 is reference row 0; query 1's source also holds reference row 2 and 3
    excl = Exclusion(np.array([0, -1, -1, -1]), np.array([5, 6, 7, 8]),
                     np.array([5, 9, 6, 6, 9]))
    assert relevant_counts(ql, rl, excl).tolist() == [1, 1, 0, 0]
    out = retrieval_scores(np.array([[0, 1], [1, 0], [0, 0], [0, 0]]), ql,
                           np.array([2, 1, 0, 0]), (1,), max_r=10)
    assert out["valid"].tolist() == [True, True, False, False]
    np.testing.assert_allclose(out["r_precision"][:2], [0.5, 1.0])
    np.testing.assert_allclose(out["map_at_r"][:2], [0.5, 1.0])
