"""evaluate(): batching does not change results; partial labels; exclusion on splits."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.errors import PairkitError
from pairkit.eval.run import EvalConfig, EvalSide, evaluate


def eval_side(seed: int, n: int, classes: int = 5, d: int = 12, views: int = 2,
          prefix: str = "") -> EvalSide:
    centres = np.random.default_rng(7).normal(size=(classes, d))
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n // views), views)
    lab = src % classes
    x = centres[lab] + 1.5 * rng.normal(size=(n // views, d))[src] + 0.4 * rng.normal(size=(n, d))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return EvalSide(x, np.array([f"c{v}" for v in lab], dtype=object),
                    np.array([f"{prefix}{v}" for v in src], dtype=object))


def test_block_size_does_not_change_results() -> None:
    q, r = eval_side(1, 90, prefix="q"), eval_side(2, 300, prefix="r")
    base = dict(knn_ks=(3, 10), recall_ks=(1, 4), metrics=("knn", "retrieval", "geometry"))
    small = evaluate(q, r, EvalConfig(block_rows=7, **base)).metrics
    big = evaluate(q, r, EvalConfig(block_rows=10_000, **base)).metrics
    assert small == big
    assert 0.2 < small["knn_top1"] < 1.0


def test_queries_read_on_demand_give_the_same_report() -> None:
    """Queries left in a RowView (``eval --ray``: read a block at a time, the geometry's
    sample gathered in one read) give every metric and score the array gives."""
    from pairkit.core.row_view import RowView

    q, r = eval_side(1, 90, prefix="q"), eval_side(2, 300, prefix="r")
    for gallery in ("reference", "queries"):
        cfg = EvalConfig(knn_ks=(3, 10), recall_ks=(1, 4), block_rows=7, collect_scores=True,
                         probe_weight_decays=(1e-4, 1e-2), gallery=gallery)
        want = evaluate(q, r, cfg)
        got = evaluate(EvalSide(RowView(q.vectors), q.labels, q.sources), r, cfg)
        assert got.metrics == want.metrics
        assert {"linear_top1", "alignment", "uniformity"} <= set(want.metrics)
        assert set(got.scores) == set(want.scores) and got.scores
        for key, value in want.scores.items():
            np.testing.assert_array_equal(got.scores[key], value)


def test_gallery_of_queries_excludes_own_source() -> None:
    q = eval_side(3, 80)
    cfg = EvalConfig(metrics=("retrieval",), gallery="queries", recall_ks=(1,))
    excl = evaluate(q, q, cfg).metrics
    incl = evaluate(q, q, EvalConfig(metrics=("retrieval",), gallery="queries",
                                     recall_ks=(1,), exclude_same_source=False)).metrics
    # the other view of the source is the easiest match: including it inflates P@1
    assert incl["precision_at_1"] > excl["precision_at_1"]
    x, labels, src = q.vectors, q.labels, q.sources
    sims = x @ x.T
    sims[src[:, None] == src[None, :]] = -np.inf
    p1 = np.mean(labels[np.argmax(sims, axis=1)] == labels)
    assert excl["precision_at_1"] == pytest.approx(p1)


def test_partially_labelled_items_are_left_out_of_label_metrics() -> None:
    q, r = eval_side(4, 60, prefix="q"), eval_side(5, 200, prefix="r")
    ql = q.labels.copy()
    ql[:10] = None
    rl = r.labels.copy()
    rl[::3] = None
    rep = evaluate(EvalSide(q.vectors, ql, q.sources), EvalSide(r.vectors, rl, r.sources),
                   EvalConfig(metrics=("knn", "retrieval"), knn_ks=(5,)))
    assert any("labelled items only: 50 of 60 queries" in n for n in rep.notes)
    keep_q, keep_r = ql != None, rl != None  # noqa: E711 - elementwise
    ref = evaluate(EvalSide(q.vectors[keep_q], ql[keep_q], q.sources[keep_q]),
                   EvalSide(r.vectors[keep_r], rl[keep_r], r.sources[keep_r]),
                   EvalConfig(metrics=("knn", "retrieval"), knn_ks=(5,)))
    for key in ("knn_top1", "precision_at_1", "map_at_r"):
        assert rep.metrics[key] == pytest.approx(ref.metrics[key])


def test_max_r_notes_and_exact_when_large_enough() -> None:
    q, r = eval_side(6, 40, classes=2, prefix="q"), eval_side(7, 200, classes=2, prefix="r")
    exact = evaluate(q, r, EvalConfig(metrics=("retrieval",), max_r=1000))
    capped = evaluate(q, r, EvalConfig(metrics=("retrieval",), max_r=20))
    assert not any("lower bounds" in n for n in exact.notes)
    assert any("R > --max-r 20 for 40 queries" in n for n in capped.notes)
    assert capped.metrics["map_at_r"] <= exact.metrics["map_at_r"]


def test_empty_queries_and_bad_config() -> None:
    r = eval_side(8, 20)
    empty = EvalSide(np.zeros((0, 12), np.float32), None, np.zeros(0, dtype=object))
    with pytest.raises(PairkitError, match="no queries"):
        evaluate(empty, r, EvalConfig())
    with pytest.raises(PairkitError, match="--retrieval-gallery must be one of"):
        evaluate(r, r, EvalConfig(gallery="all"))


def test_knn_mean_per_class_recall_by_hand() -> None:
    """Three queries of class a, all right, and one of class b, wrong (it lies among the
    a references): top-1 3/4, mean per-class recall (1 + 0) / 2; every k's the same."""
    def unit(deg: float) -> list[float]:
        return [np.cos(np.radians(deg)), np.sin(np.radians(deg))]

    refs = EvalSide(np.array([unit(a) for a in (0, 5, 10, 85, 90, 95)], np.float32),
                    np.array(["a"] * 3 + ["b"] * 3, dtype=object),
                    np.array([f"r{i}" for i in range(6)], dtype=object))
    queries = EvalSide(np.array([unit(a) for a in (1, 4, 8, 6)], np.float32),
                       np.array(["a", "a", "a", "b"], dtype=object),
                       np.array([f"q{i}" for i in range(4)], dtype=object))
    report = evaluate(queries, refs, EvalConfig(knn_ks=(1, 3), metrics=("knn",),
                                                block_rows=3))
    got = report.metrics
    # three times as many queries of a as of b: said, with both sizes
    assert ("query classes differ 3x in size (3 a, 1 b): top-1 is mostly the large "
            "classes'; the mean per-class recalls weigh every class the same") in report.notes
    assert got["knn_top1"] == pytest.approx(0.75)
    assert got["knn_mean_per_class_recall"] == pytest.approx(0.5)
    assert got["knn"]["3"]["mean_per_class_recall"] == pytest.approx(0.5)


def test_balanced_queries_get_no_imbalance_note() -> None:
    q, r = eval_side(1, 90, prefix="q"), eval_side(2, 300, prefix="r")  # 9 sources a class
    report = evaluate(q, r, EvalConfig(knn_ks=(3,), metrics=("knn",)))
    assert not any("differ" in note for note in report.notes)


def test_knn_equal_class_scores_go_to_the_label_seen_first() -> None:
    """References a, b at cos 0.73 and a, b at cos 0.54: the classes tie exactly, and a
    (the query's label, first in the items) wins: top-1 1.0 (was 0.0, a rounding lead
    of b)."""
    q = EvalSide(np.array([[1.0, 0.0]], np.float32), np.array(["a"], dtype=object),
                 np.array(["q"], dtype=object))
    cos = np.array([0.73, 0.73, 0.54, 0.54])
    r = EvalSide(np.stack([cos, np.sqrt(1 - cos ** 2)], axis=1).astype(np.float32),
                 np.array(["a", "b", "a", "b"], dtype=object),
                 np.array(["r0", "r1", "r2", "r3"], dtype=object))
    m = evaluate(q, r, EvalConfig(metrics=("knn",), knn_ks=(4,))).metrics
    assert m["knn_top1"] == 1.0 and m["knn_mean_per_class_recall"] == 1.0
    # the other label first in the items: b wins the same tie
    q_b = EvalSide(q.vectors, np.array(["b"], dtype=object), q.sources)
    m = evaluate(q_b, r, EvalConfig(metrics=("knn",), knn_ks=(4,))).metrics
    assert m["knn_top1"] == 1.0


def test_row_chunks_do_not_change_results(monkeypatch) -> None:
    """hunt-r 7: a search block is sorted, compacted and scored some rows at a time
    (ROW_CHUNK_BYTES); one row at a time gives every metric and score of one chunk per
    block, with excluded rows (two views a source, the query among the gallery)."""
    from pairkit.index import search

    q, r = eval_side(1, 90, prefix="q"), eval_side(2, 300, prefix="r")
    for gallery in ("reference", "queries"):
        cfg = EvalConfig(knn_ks=(3, 10), recall_ks=(1, 4), max_r=400, block_rows=40,
                         collect_scores=True, gallery=gallery,
                         metrics=("knn", "retrieval"))
        whole = evaluate(q, r, cfg)
        monkeypatch.setattr(search, "ROW_CHUNK_BYTES", 1)
        rows = evaluate(q, r, cfg)
        monkeypatch.undo()
        assert rows.metrics == whole.metrics
        assert rows.scores.keys() == whole.scores.keys()
        for key in whole.scores:
            assert np.array_equal(rows.scores[key], whole.scores[key])
        assert 0 < whole.metrics["map_at_r"] < 1


def test_a_large_max_r_holds_one_block_of_neighbours(monkeypatch) -> None:
    """Found by a bug hunt (hunt-r 7): a block of neighbours for --max-r in the thousands
    made ~8 (b, K) temporaries (FAISS's result re-sorted into copies, the compaction's
    order and copies, int64 labels, cumulative counts and precisions in int64/float64),
    ~80 bytes a neighbour beside the 12 of the result. Two classes of 600 sources (two views
    each), R about 1,200: one block of 2,400 queries x ~1,200 neighbours. Failed before
    (traced peak 187 MB; now 74 MB)."""
    import tracemalloc

    from pairkit.index import search

    q, r = eval_side(1, 2400, classes=2, prefix="q"), eval_side(2, 2400, classes=2, prefix="r")
    cfg = EvalConfig(recall_ks=(1,), max_r=2000, metrics=("retrieval",))
    monkeypatch.setattr(search, "ROW_CHUNK_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        report = evaluate(q, r, cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0.5 < report.metrics["map_at_r"] < report.metrics["precision_at_1"] < 1
    # the block's result and FAISS's answer (12 bytes each a neighbour) and 1 MiB chunks
    assert peak < 2400 * 1250 * 30 + (8 << 20)


def hardest_by_brute_force(q: EvalSide, r: EvalSide, same_source: bool = True) -> np.ndarray:
    """Each query's nearest reference of another class (never one of its own source),
    from the whole score matrix; queries without one left out."""
    s = q.vectors.astype(np.float64) @ r.vectors.astype(np.float64).T
    allowed = q.labels[:, None] != r.labels[None, :]
    if same_source:
        allowed &= q.sources[:, None] != r.sources[None, :]
    s[~allowed] = -np.inf
    best = s.max(axis=1)
    return best[np.isfinite(best)]


@pytest.mark.parametrize("options", [
    dict(),  # the defaults (k 20 fetched: most queries find one)
    dict(knn_ks=(1,)),  # one neighbour fetched: most queries see their own class only
    dict(knn_ks=(1,), metrics=("knn", "geometry"), block_rows=3),
    dict(metrics=("retrieval", "geometry"), recall_ks=(1,), max_r=2),  # no kNN asked
])
def test_mined_negative_scores_are_each_querys_nearest_other_class(options) -> None:
    """hunt-v F2: the mined-negative scores were taken from the neighbours the kNN pass
    fetched, so a query whose first neighbours were all its own class fell out of the
    sample (1 of 12 left with --knn-k 3) and the mean ran high; with retrieval only the
    row was missing. Tight classes make most first neighbours same-class; the scores
    must be every query's nearest other-class reference, as a brute-force search."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(3, 8))

    def side(n: int, prefix: str) -> EvalSide:
        lab = np.arange(n) % 3
        x = centres[lab] + 0.05 * rng.normal(size=(n, 8))
        x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
        return EvalSide(x, np.array([f"c{v}" for v in lab], dtype=object),
                        np.array([f"{prefix}{i // 2}" for i in range(n)], dtype=object))

    q, r = side(12, "q"), side(60, "r")
    got = evaluate(q, r, EvalConfig(collect_scores=True, **options)).scores["mined_negative"]
    want = hardest_by_brute_force(q, r)
    assert len(got) == 12 == len(want)
    np.testing.assert_allclose(np.sort(got), np.sort(want), atol=1e-6)
    # the same store on both sides (eval's split: the query's own rows excluded)
    one = evaluate(r, r, EvalConfig(collect_scores=True, knn_ks=(1,)),
                   self_rows=np.arange(60)).scores["mined_negative"]
    np.testing.assert_allclose(np.sort(one), np.sort(hardest_by_brute_force(r, r)), atol=1e-6)


def knn_by_brute_force(q: EvalSide, r: EvalSide, k: int, temperature: float = 0.07
                       ) -> tuple[float, float]:
    """Top-1 and top-5 of the weighted kNN, one query at a time in float64 (references
    of other sources; classes by exp(sim / T) summed over the k nearest)."""
    sims = q.vectors.astype(np.float64) @ r.vectors.astype(np.float64).T
    sims[q.sources[:, None] == r.sources[None, :]] = -np.inf
    top1 = top5 = 0
    for i in range(len(q)):
        score: dict[str, float] = {}
        for j in np.argsort(-sims[i], kind="stable")[:k]:
            score[r.labels[j]] = score.get(r.labels[j], 0.0) + np.exp(sims[i, j] / temperature)
        ranked = sorted(score, key=lambda c: -score[c])
        top1 += ranked[0] == q.labels[i]
        top5 += q.labels[i] in ranked[:5]
    return top1 / len(q), top5 / len(q)


def test_knn_top1_and_top5_of_every_k_match_brute_force() -> None:
    """Eight classes, k = 10, 3, 1 in one search of 10 neighbours (the smaller ks get
    wider lists than they use): each k's top-1 and top-5, and the headline knn_top1 /
    knn_top5 (the first k's), against a direct float64 kNN."""
    q, r = eval_side(11, 120, classes=8, prefix="q"), eval_side(12, 320, classes=8,
                                                                prefix="r")
    m = evaluate(q, r, EvalConfig(metrics=("knn",), knn_ks=(10, 3, 1), block_rows=50)).metrics
    for k in (10, 3, 1):
        top1, top5 = knn_by_brute_force(q, r, k)
        assert m["knn"][str(k)]["top1"] == pytest.approx(top1), k
        assert m["knn"][str(k)]["top5"] == pytest.approx(top5), k
    top1, top5 = knn_by_brute_force(q, r, 10)
    assert top1 < top5 < 1.0  # the two differ here, so a swap would show
    assert m["knn_top1"] == pytest.approx(top1)
    assert m["knn_top5"] == pytest.approx(top5)
    # the ks differ from each other too
    assert len({m["knn"][str(k)]["top1"] for k in (10, 3, 1)}) > 1


def test_queries_without_a_relevant_reference_are_left_out_of_retrieval() -> None:
    """Ten queries of a class no reference has (R = 0): every retrieval mean is that of
    the other queries alone (not deflated by the ten), and a note says so."""
    q, r = eval_side(13, 80, prefix="q"), eval_side(14, 200, prefix="r")
    labels = q.labels.copy()
    labels[:10] = "nowhere"
    cfg = EvalConfig(metrics=("retrieval",), recall_ks=(1, 4))
    rep = evaluate(EvalSide(q.vectors, labels, q.sources), r, cfg)
    keep = slice(10, None)
    ref = evaluate(EvalSide(q.vectors[keep], labels[keep], q.sources[keep]), r, cfg)
    assert "retrieval: 10 queries without a relevant reference left out" in rep.notes
    assert rep.details["retrieval_queries"] == 70
    for key in ("precision_at_1", "r_precision", "map_at_r"):
        assert rep.metrics[key] == pytest.approx(ref.metrics[key]), key
    assert rep.metrics["recall_at_k"] == pytest.approx(ref.metrics["recall_at_k"])
    assert ref.metrics["precision_at_1"] > 0.3 and ref.metrics["recall_at_k"]["4"] > 0.3
