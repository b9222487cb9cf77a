"""False-negative rules on small hand-built cases, plus the vectorised path
against a plain per-anchor reference loop."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pairkit.errors import UsageError
from pairkit.index.kmeans import spherical_kmeans
from pairkit.mine.clusters import (
    cluster_counts,
    knn_graph,
    label_propagation,
    propagate_once,
)
from pairkit.mine.false_negatives import (
    DEFAULT_RULES,
    RULES,
    FalseNegativeConfig,
    FnContext,
    build_context,
    flag_false_negatives,
    parse_rules,
)
from pairkit.mine.fn_context import similarity_to_rows
from pairkit.mine.rules import community


def unit(*rows: list[float]) -> np.ndarray:
    x = np.asarray(rows, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def angles(*deg: float) -> np.ndarray:
    """Unit vectors in 2-D at the given angles (degrees)."""
    r = np.radians(np.asarray(deg, dtype=np.float64))
    return np.stack([np.cos(r), np.sin(r)], axis=1).astype(np.float32)


def ctx_of(vectors: np.ndarray, sources: list[int], labels=None, **kw) -> FnContext:
    return FnContext(vectors=vectors, labels=labels, sources=np.asarray(sources, np.int64), **kw)


def flag(ctx, anchors, cand, scores, pos, cfg, positives=None):
    return flag_false_negatives(
        ctx,
        np.asarray(anchors, np.int64),
        np.asarray(cand, np.int64),
        np.asarray(scores, np.float32),
        np.asarray(pos, np.float32),
        cfg,
        positives,
    )


# -- label --------------------------------------------------------------------------
def test_label_rule_flags_same_label_only():
    labels = np.array(["a", "a", "b", None, "a", "b"], dtype=object)
    ctx = ctx_of(np.eye(6, dtype=np.float32), [0, 1, 2, 3, 4, 5], labels)
    cfg = FalseNegativeConfig(rules=("label",))
    cand = [[1, 2, 3, 4, -1], [0, 1, 2, 4, 5]]
    flags, reasons = flag(ctx, [0, 3], cand, np.zeros((2, 5)), [0.5, 0.5], cfg)
    # anchor 0 ('a'): 1 and 4 share 'a'; -1 padding never; anchor 3 has no label: nothing
    assert flags.tolist() == [[True, False, False, True, False], [False] * 5]
    assert reasons[0].tolist() == ["label", None, None, "label", None]


def test_label_rule_without_labels_flags_nothing():
    ctx = ctx_of(np.eye(3, dtype=np.float32), [0, 1, 2])
    flags, reasons = flag(ctx, [0], [[1, 2]], [[0.9, 0.8]], [0.5],
                          FalseNegativeConfig(rules=("label",)))
    assert not flags.any() and reasons.tolist() == [[None, None]]


# -- margin -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pos", "scores", "expected"),
    [
        # pos 0.5, margin 0.9 -> threshold 0.45; equal to the threshold is not above it
        (0.5, [0.46, 0.45, 0.44, 0.99], [True, False, False, True]),
        # pos -0.2 -> threshold -0.2 - 0.1 * 0.2 = -0.22 (stays below the positive)
        (-0.2, [-0.21, -0.22, -0.3, 0.1], [True, False, False, True]),
        # pos 0 -> threshold 0
        (0.0, [0.01, 0.0, -0.01, 0.5], [True, False, False, True]),
        # no positive (-inf): nothing is flagged
        (-np.inf, [0.9, 0.5, 0.1, -0.5], [False, False, False, False]),
    ],
)
def test_margin_rule_hand_computed(pos, scores, expected):
    ctx = ctx_of(np.eye(5, dtype=np.float32), [0, 1, 2, 3, 4])
    cfg = FalseNegativeConfig(rules=("margin",), margin=0.9)
    flags, reasons = flag(ctx, [0], [[1, 2, 3, 4]], [scores], [pos], cfg)
    assert flags[0].tolist() == expected
    assert [r == "margin" for r in reasons[0]] == expected


def test_margin_rule_ignores_padding_and_equals_percent_of_positive():
    ctx = ctx_of(np.eye(3, dtype=np.float32), [0, 1, 2])
    cfg = FalseNegativeConfig(rules=("margin",), margin=0.95)
    flags, _ = flag(ctx, [0], [[1, -1, 2]], [[0.96, 0.99, 0.94]], [1.0], cfg)
    assert flags.tolist() == [[True, False, False]]  # 0.95 * 1.0 = 0.95


# -- near-duplicate ------------------------------------------------------------------
def test_near_duplicate_rule_with_groups():
    groups = np.array([0, 0, -1, 1, 1, -1, -1], dtype=np.int64)
    ctx = ctx_of(np.eye(7, dtype=np.float32), [0, 1, 2, 3, 4, 5, 6], groups=groups)
    cfg = FalseNegativeConfig(rules=("near-duplicate",))
    # anchor 0 (group 0), positive 3 (group 1): candidates 1 (group 0) and 4 (group 1)
    flags, reasons = flag(ctx, [0, 5], [[1, 2, 4, 5], [2, 6, 0, -1]], np.zeros((2, 4)),
                          [0.5, 0.5], cfg, positives=[np.array([3]), np.array([], np.int64)])
    assert flags.tolist() == [[True, False, True, False], [False] * 4]  # -1 is no group
    assert reasons[0, 0] == "near_duplicate"


def test_near_duplicate_rule_computes_groups_when_missing():
    pytest.importorskip("pairkit.mine.near_duplicates")
    # row 2 (source 1) is 0.5 degrees from the anchor's source (row 0): one group
    x = angles(0, 30, 0.5, 90, 45)
    cfg = FalseNegativeConfig(rules=("near-duplicate",), near_duplicate_threshold=0.99)
    ctx = build_context(x, None, np.array([0, 0, 1, 2, 3]), cfg)
    flags, reasons = flag(ctx, [0, 3], [[2, 3, 4], [0, 2, 4]], np.zeros((2, 3)), [0.9, 0.9], cfg)
    assert flags.tolist() == [[True, False, False], [False, False, False]]
    assert ctx.groups is not None and ctx.groups[0] == ctx.groups[1] == ctx.groups[2] >= 0
    assert reasons[0, 0] == "near_duplicate"


def test_near_duplicate_threshold_fallback(monkeypatch):
    # without pairkit.mine.near_duplicates the rule tests cosine >= threshold
    monkeypatch.setitem(sys.modules, "pairkit.mine.near_duplicates", None)
    x = angles(0, 40, 42, 1, 60)  # 0 anchor, 1 its other view (same source)
    ctx = ctx_of(x, [0, 0, 1, 2, 3])
    cfg = FalseNegativeConfig(rules=("near-duplicate",), near_duplicate_threshold=0.99)
    cand = [[2, 3, 4]]
    scores = [[float(x[0] @ x[c]) for c in cand[0]]]
    flags, _ = flag(ctx, [0], cand, scores, [float(x[0] @ x[1])], cfg)
    # 2: cos(2 deg) to the positive = 0.9994 -> flagged; 3: cos(1 deg) to the anchor;
    # 4: 20 deg from the positive -> not
    assert flags.tolist() == [[True, True, False]]


def test_near_duplicate_fallback_flags_a_score_exactly_at_the_threshold(monkeypatch):
    """Without groups the rule flags cosine >= threshold (dedup's "at least"): threshold
    0.5, candidates at exactly 0.5 to the anchor (3) or to the positive (2) are flagged,
    those at the next float32 below 0.5 (4, 5) are not. Every product is exact."""
    monkeypatch.setitem(sys.modules, "pairkit.mine.near_duplicates", None)
    below = float(np.nextafter(np.float32(0.5), np.float32(0)))
    x = np.array([[0, 1, 0], [1, 0, 0], [0.5, 0, 0.8], [0, 0.5, 0.8], [0, below, 0.8],
                  [below, 0, 0.8]], np.float32)
    ctx = ctx_of(x, [0, 0, 1, 2, 3, 4])  # 0 anchor, 1 its other view (the positive)
    cfg = FalseNegativeConfig(rules=("near-duplicate",), near_duplicate_threshold=0.5)
    cand = [[2, 3, 4, 5]]
    scores = [[float(x[0] @ x[c]) for c in cand[0]]]
    assert scores == [[0.0, 0.5, below, 0.0]]
    flags, _ = flag(ctx, [0], cand, scores, [0.0], cfg)
    assert flags.tolist() == [[True, True, False, False]]


# -- cluster ------------------------------------------------------------------------
def test_cluster_rule_counts_votes():
    assign = np.array([[0, 0, 1, 0, 2],   # granularity 1
                       [5, 5, 5, 6, 6],   # granularity 2
                       [7, 8, 7, 7, 7]])  # granularity 3
    ctx = ctx_of(np.eye(5, dtype=np.float32), [0, 1, 2, 3, 4], cluster_assign=assign)
    cand = [[1, 2, 3, 4, -1]]
    # shared with anchor 0: item1 2 votes, item2 2, item3 2, item4 1
    for votes, expected in [(1, [True] * 4 + [False]),
                            (2, [True, True, True, False, False]),
                            (3, [False] * 5)]:
        # cluster_max_share 1: the random-pair guard off (5 rows of hand-made runs)
        cfg = FalseNegativeConfig(rules=("cluster",), cluster_ks=(2, 2, 2), cluster_runs=1,
                                  cluster_votes=votes, cluster_max_share=1.0)
        flags, _ = flag(ctx, [0], cand, np.zeros((1, 5)), [0.5], cfg)
        assert flags[0].tolist() == expected


def test_spherical_kmeans_reproducible_and_finds_blobs():
    rng = np.random.default_rng(0)
    centers = np.eye(8, dtype=np.float32)[:4] * 5
    x = np.repeat(centers, 30, axis=0) + rng.normal(0, 0.3, size=(120, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    a1, c1 = spherical_kmeans(x, 4, seed=3)
    a2, c2 = spherical_kmeans(x, 4, seed=3)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_allclose(np.linalg.norm(c1, axis=1), 1.0, atol=1e-5)
    truth = np.repeat(np.arange(4), 30)
    # each blob is one cluster: the partition equals the truth up to renaming
    assert len(set(zip(truth.tolist(), a1.tolist(), strict=True))) == 4
    assert spherical_kmeans(x, 1)[0].tolist() == [0] * 120
    assert cluster_counts(1000, (10, 100, 5000)) == (100, 10, 2)


def test_cluster_rule_end_to_end_on_blobs():
    rng = np.random.default_rng(1)
    x = np.repeat(np.eye(6, dtype=np.float32)[:3] * 5, 20, axis=0)
    x += rng.normal(0, 0.3, size=x.shape).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    truth = np.repeat(np.arange(3), 20)
    cfg = FalseNegativeConfig(rules=("cluster",), cluster_ks=(3,), cluster_runs=2,
                              cluster_votes=2)
    ctx = build_context(x, None, np.arange(60), cfg, seed=0)
    cand = np.array([[1, 25, 45, 19]])
    flags, _ = flag(ctx, [0], cand, np.zeros((1, 4)), [0.9], cfg)
    assert flags[0].tolist() == (truth[cand[0]] == truth[0]).tolist()
    again = build_context(x, None, np.arange(60), cfg, seed=0)
    np.testing.assert_array_equal(ctx.cluster_assign, again.cluster_assign)


# -- community ----------------------------------------------------------------------
def test_propagate_once_matches_loop():
    rng = np.random.default_rng(3)
    n, m = 40, 5
    labels = rng.integers(0, 6, n)
    nb = rng.integers(-1, n, size=(n, m))
    w = np.round(rng.uniform(-0.2, 1.0, size=(n, m)), 1)  # rounded: ties happen
    got = propagate_once(labels, nb, w)
    for i in range(n):
        total: dict[int, float] = {}
        for j, wj in zip(nb[i], w[i], strict=True):
            if j >= 0:
                total[int(labels[j])] = total.get(int(labels[j]), 0.0) + max(float(wj), 0.0)
        best = [lab for lab, t in total.items() if t > 0 and t == max(total.values())]
        assert got[i] == (min(best) if best else labels[i]), i


def test_propagate_once_keeps_the_label_of_a_row_without_positive_weight():
    """Negative, zero and padded entries count 0: a row whose neighbours all weigh 0 keeps
    its own label instead of taking the smallest neighbour label."""
    labels = np.array([0, 1, 2, 3])
    nb = np.array([[1, -1], [2, -1], [1, -1], [2, 0]])
    w = np.array([[-0.5, 0.9], [0.3, 0.0], [0.3, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(propagate_once(labels, nb, w), [0, 2, 1, 3])


def test_label_propagation_two_groups():
    # rows 0-3 and 4-7 are two cliques; one weak edge 3 -> 4 joins them
    nb = np.full((8, 3), -1)
    w = np.zeros((8, 3), dtype=np.float32)
    for g in (range(0, 4), range(4, 8)):
        for i in g:
            others = [j for j in g if j != i]
            nb[i] = others
            w[i] = 0.9
    nb[3, 2], w[3, 2] = 4, 0.1
    for seed in (0, 1, 2):
        comm = label_propagation(nb, w, seed=seed)
        assert comm.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
        np.testing.assert_array_equal(comm, label_propagation(nb, w, seed=seed))


def test_knn_graph_excludes_own_source_and_matches_brute_force():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 5)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    src = np.arange(30) // 2
    ids, scores = knn_graph(x, src, 4)
    sim = x @ x.T
    for i in range(30):
        allowed = [j for j in np.argsort(-sim[i]) if src[j] != src[i]][:4]
        assert ids[i].tolist() == allowed
        np.testing.assert_allclose(scores[i], sim[i, allowed], atol=1e-5)
    ids, scores = knn_graph(x[:3], np.array([0, 0, 1]), 4)  # fewer rows than m: padded
    assert ids.tolist()[0] == [2, -1, -1, -1] and np.isinf(scores[0, 1])


def test_community_rule_on_blobs_of_unequal_size():
    rng = np.random.default_rng(2)
    sizes = [40, 8]  # one big and one small class, far apart
    x = np.concatenate([np.eye(6)[c] * 5 + rng.normal(0, 0.4, size=(s, 6))
                        for c, s in enumerate(sizes)]).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    truth = np.repeat([0, 1], sizes)
    cfg = FalseNegativeConfig(rules=("community",), community_neighbours=5)
    ctx = build_context(x, None, np.arange(len(x)), cfg, seed=0)
    assert len(np.unique(ctx.communities)) == 2
    cand = np.array([[1, 39, 40, 47], [0, 45, 46, 20]])
    flags, reasons = flag(ctx, [0, 41], cand, np.zeros((2, 4)), [0.9, 0.9], cfg)
    assert flags.tolist() == (truth[cand] == truth[[0, 41]][:, None]).tolist()
    assert reasons[0, 0] == "community"
    # a caller's kNN graph is used instead of a search of its own
    given = knn_graph(x, np.arange(len(x)), 5)
    ctx2 = build_context(x, None, np.arange(len(x)), cfg, seed=0, neighbours=given)
    np.testing.assert_array_equal(ctx2.communities, ctx.communities)


# -- removed rules -------------------------------------------------------------------
def test_removed_support_rule_says_why():
    for make in (lambda: parse_rules("near-duplicate,support"),
                 lambda: FalseNegativeConfig(rules=("support",))):
        with pytest.raises(UsageError, match="the support rule .* was removed"):
            make()


def test_similarity_to_rows_blocks_match_one_block():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 7)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cand = rng.integers(-1, 50, size=(50, 9))
    views = np.stack([np.arange(50), (np.arange(50) + 1) % 50])
    views[1, ::4] = -1
    one = similarity_to_rows(x, views.T, cand)
    tiny = similarity_to_rows(x, views.T, cand, block_bytes=1)  # one anchor per block
    np.testing.assert_allclose(tiny, one, atol=1e-6)
    ref = np.einsum("nmd,nkd->nmk", x[np.maximum(views.T, 0)], x[np.maximum(cand, 0)])
    ref[views.T < 0] = np.nan
    np.testing.assert_allclose(one, ref, atol=1e-6)



def test_similarity_to_rows_blocks_by_the_longer_of_rows_and_candidates():
    """Many rows per anchor, one candidate (the estimate's random pairs, an anchor of one
    10,000-view source): the block used to be sized by the candidates alone, so every
    anchor's rows were gathered at once (2,000 x 10,000 x 128 float32: 10 GB)."""
    import tracemalloc

    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 16)).astype(np.float32)
    rows = np.tile(np.arange(2000), (200, 1))  # 200 anchors x 2,000 rows
    cand = rng.integers(0, 2000, size=(200, 1))
    # its imports made first: a module imported inside the traced call (this test run
    # first in its process) counted its code objects as the call's memory (flaky)
    similarity_to_rows(x, rows[:1], cand[:1], block_bytes=1 << 20)
    tracemalloc.start()
    try:
        got = similarity_to_rows(x, rows, cand, block_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # out (1.6 MB) + about a block; one block of all anchors' rows was 25.6 MB
    assert peak < 6 << 20, peak
    ref = np.einsum("nmd,nkd->nmk", x[rows], x[cand])
    np.testing.assert_allclose(got, ref, atol=1e-5)

def test_similarity_to_rows_many_rows_few_candidates_same_products():
    """More rows than candidates (an anchor of a big source and one candidate, the
    estimate's random pairs): each candidate is scored against the rows by id, one call
    per candidate column, not one per row column (3,000 calls per block before); the
    products are the ones scored row by row, bit for bit (FAISS's kernel is symmetric)."""
    from pairkit.index import search

    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 24)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rows = rng.integers(-1, 300, size=(40, 120))
    cand = rng.integers(0, 300, size=(40, 2))
    calls = []
    real = search.exact_scores

    def counted(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return real(*a, **kw)

    mp = pytest.MonkeyPatch()
    mp.setattr(search, "exact_scores", counted)
    try:
        got = similarity_to_rows(x, rows, cand)
    finally:
        mp.undo()
    assert len(calls) == 2, len(calls)  # one per candidate column (120 before)
    want = np.stack([real(x[np.maximum(rows[:, j], 0)], x, cand) for j in range(120)], axis=1)
    want[np.broadcast_to((rows < 0)[:, :, None], want.shape)] = np.nan
    np.testing.assert_array_equal(got, want)


def test_near_duplicate_rule_flags_in_blocks():
    """The near-duplicate rule compares each candidate with the anchor's positives block
    by block: same flags as the whole (n, m, k) products compared at once, without
    holding them (with their NaN-cleaned copy: 3x (n, m, k) floats before)."""
    import tracemalloc

    from pairkit.mine.fn_context import any_similar
    from pairkit.mine.rules import near_duplicate

    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 8)).astype(np.float32)
    x[200:] = x[:200] + 0.02 * rng.normal(size=(200, 8)).astype(np.float32)  # near copies
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    pos = rng.integers(-1, 400, size=(300, 64))
    cand = rng.integers(0, 400, size=(300, 50))
    thr = 0.98
    want = (np.nan_to_num(similarity_to_rows(x, pos, cand), nan=-np.inf) >= thr).any(axis=1)
    assert want.any() and not want.all()
    np.testing.assert_array_equal(any_similar(x, pos, cand, thr, block_bytes=1 << 14), want)
    ctx = FnContext(x, None, np.arange(400, dtype=np.int64), pairwise_near_duplicates=True)
    cfg = FalseNegativeConfig(rules=("near-duplicate",), near_duplicate_threshold=thr)
    scores = np.einsum("nd,nkd->nk", x[:300], x[cand])
    from pairkit.mine import fn_context

    mp = pytest.MonkeyPatch()
    mp.setattr(fn_context, "SIMILARITY_BLOCK_BYTES", 1 << 14, raising=False)
    tracemalloc.start()
    try:
        flags = near_duplicate.flag(ctx, np.arange(300), cand, scores, scores[:, 0], cfg, pos)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        mp.undo()
    np.testing.assert_array_equal(flags, (want | (scores >= thr)))
    assert peak < 300 * 64 * 50 * 4, peak  # less than one (n, m, k) float32 array


def test_other_views_without_a_table_as_wide_as_the_largest_source():
    """The near-duplicate rule's other views of an anchor's source come from the rows
    sorted by source, as wide as *these* anchors' largest source: the rule no longer
    prepares a (sources x largest source) table (1,001 sources, one of 500 rows: 4 MB
    here; 7,500 sources and one of 10,000 views: 600 MB; failed before: the table was
    made and the rows of two-view anchors were 500 wide)."""
    import tracemalloc

    from pairkit.mine.fn_context import other_views
    from pairkit.mine.rules import near_duplicate

    rng = np.random.default_rng(4)
    sources = np.concatenate([np.zeros(500, np.int64), np.repeat(np.arange(1, 1001), 2)])
    sources = sources[rng.permutation(len(sources))]
    x = rng.normal(size=(len(sources), 4)).astype(np.float32)
    ctx = FnContext(x, None, sources)
    tracemalloc.start()
    try:
        near_duplicate.prepare(ctx, FalseNegativeConfig(rules=("near-duplicate",)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1001 * 500 * 8 // 4, peak
    small = np.flatnonzero(sources != 0)[:50]
    got = other_views(ctx, small)
    assert got.shape == (50, 2)
    for row, a in zip(got, small, strict=True):
        want = [int(j) for j in np.flatnonzero(sources == sources[a])]
        assert [int(j) if j != a else -1 for j in want] == [int(v) for v in row]
    mixed = np.array([small[0], int(np.flatnonzero(sources == 0)[3])])
    got = other_views(ctx, mixed)
    assert got.shape == (2, 500)
    big_rows = np.flatnonzero(sources == 0)
    np.testing.assert_array_equal(got[1], np.where(big_rows == mixed[1], -1, big_rows))
    assert (got[0, 2:] == -1).all()


# -- all rules against a per-anchor reference loop ----------------------------------
def reference_flags(x, labels, sources, groups, assign, comm, anchors, cand, scores, pos, cfg,
                    white=None):
    """Plain loops, one anchor and one candidate at a time. ``white``: the mutual-neighbour
    rule's lists (ids (N, m))."""
    out = np.empty(cand.shape, dtype=object)
    mutual_sources = set()
    if white is not None:
        for i in range(len(x)):
            for j in white[i]:
                if j >= 0 and i in white[j] and sources[i] != sources[j]:
                    mutual_sources |= {(sources[i], sources[j]), (sources[j], sources[i])}
    # the rule's guard: off when its source pairs hold more than MAX_SHARE of the cluster
    # rule's fixed sample of random pairs of two sources (seed 0, as the context's)
    from pairkit.mine.rules.cluster import random_pairs
    from pairkit.mine.rules.mutual import MAX_SHARE

    sample = list(zip(*random_pairs(len(x), np.asarray(sources)), strict=True))
    hits = sum((sources[i], sources[j]) in mutual_sources for i, j in sample)
    mutual_on = hits <= MAX_SHARE * len(sample)
    trust = cfg.trust_labels and "label" in cfg.rules
    for r, a in enumerate(anchors):
        views = [v for v in range(len(x)) if sources[v] == sources[a]]
        positives = [v for v in views if v != a]
        for c_idx, c in enumerate(cand[r]):
            fired = []
            if c < 0:
                out[r, c_idx] = None
                continue
            labelled = trust and labels[a] is not None and labels[c] is not None
            for rule in cfg.rules:
                if labelled and rule in ("margin", "mutual-neighbour", "cluster", "community"):
                    continue
                if rule == "label" and labels[a] is not None and labels[a] == labels[c]:
                    fired.append("label")
                if rule == "near-duplicate":
                    near = [g for g in [groups[a]] + [groups[p] for p in positives] if g >= 0]
                    if groups[c] in near:
                        fired.append("near_duplicate")
                if rule == "margin":
                    p = float(pos[r])
                    if np.isfinite(p) and scores[r, c_idx] > p - (1 - cfg.margin) * abs(p):
                        fired.append("margin")
                if rule == "cluster":
                    votes = sum(int(assign[g][a] == assign[g][c]) for g in range(len(assign)))
                    if votes >= cfg.cluster_votes:
                        fired.append("cluster")
                if rule == "community" and comm[a] == comm[c]:
                    fired.append("community")
                if (rule == "mutual-neighbour" and (sources[a], sources[c]) in mutual_sources
                        and mutual_on):
                    fired.append("mutual_neighbour")
            out[r, c_idx] = "|".join(fired) if fired else None
    return out


@pytest.mark.parametrize("max_share", [None, 1.0])  # the mutual rule's guard: as is, never
@pytest.mark.parametrize("trust", [True, False])
def test_vectorised_matches_reference_loop(trust, max_share, monkeypatch):
    from pairkit.mine.rules import mutual

    if max_share is not None:
        monkeypatch.setattr(mutual, "MAX_SHARE", max_share)
    rng = np.random.default_rng(7)
    n = 60
    x = rng.normal(size=(n, 6)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sources = np.arange(n) // 2
    labels = np.array([None if i % 7 == 0 else f"c{i % 4}" for i in range(n)], dtype=object)
    groups = np.where(rng.random(n) < 0.5, rng.integers(0, 5, n), -1)
    cfg = FalseNegativeConfig(rules=RULES, margin=0.8, cluster_ks=(6, 12, 24),
                              cluster_runs=1, cluster_votes=2, community_neighbours=3,
                              cluster_diffusion=0.0,  # the votes (the reference's loop)
                              trust_labels=trust)
    ctx = build_context(x, labels, sources, cfg, seed=0, groups=groups)
    anchors = np.arange(0, n, 3)
    cand = rng.integers(0, n, size=(len(anchors), 8))
    cand[:, -1] = -1
    scores = np.einsum("nd,nkd->nk", x[anchors], x[np.maximum(cand, 0)]).astype(np.float32)
    pos = rng.uniform(-0.5, 0.9, size=len(anchors)).astype(np.float32)
    pos[0] = -np.inf
    flags, reasons = flag(ctx, anchors, cand, scores, pos, cfg)
    expected = reference_flags(x, labels, sources, groups, ctx.cluster_assign, ctx.communities,
                               anchors, cand, scores, pos, cfg, ctx.whitened_neighbours[0])
    assert reasons.tolist() == expected.tolist()
    assert flags.tolist() == (expected != None).tolist()  # noqa: E711
    assert flags.any() and not flags.all()
    # 30 sources of 6-d noise, depth 10: most pairs are mutual, the guard turns it off
    assert ("off" in ctx.mutual_info) == (max_share is None)
    assert ("mutual_neighbour" in "".join(r for r in reasons.ravel() if r)) == (
        max_share is not None)


def test_mutual_guard_turns_off_above_half_not_at_half(monkeypatch):
    """The mutual-neighbour rule is off when its source pairs are *more* than MAX_SHARE
    (50%) of the random pairs: a share of exactly 0.5 (given by hand) leaves it on."""
    from pairkit.mine.rules import mutual

    assert mutual.MAX_SHARE == 0.5
    for share, off in ((0.5, False), (0.5001, True), (0.4999, False)):
        monkeypatch.setattr(mutual, "source_pair_share", lambda ctx, a, b, s=share: s)
        ctx = ctx_of(np.eye(4, dtype=np.float32), [0, 1, 2, 3])
        info = mutual.guard(ctx)
        assert info["random_pair_share"] == share
        assert ("off" in info) == off, share
        assert mutual.is_off(ctx) == off


# -- mutual-neighbour -----------------------------------------------------------------
def test_mutual_neighbour_rule_by_hand():
    # 4 sources x 2 views; lists given: rows 0 and 2 are mutual (sources 0 and 1), row 4
    # lists row 6 but not back (sources 2 and 3: not mutual)
    x = np.eye(8, dtype=np.float32)
    ids = np.full((8, 2), -1, np.int64)
    ids[0], ids[2], ids[4], ids[6] = [2, -1], [0, -1], [6, -1], [0, -1]
    ctx = ctx_of(x, [0, 0, 1, 1, 2, 2, 3, 3],
                 whitened_neighbours=(ids, np.zeros((8, 2), np.float32)))
    cfg = FalseNegativeConfig(rules=("mutual-neighbour",))
    # anchor 1 (source 0, the other view): the whole of source 1 is flagged, at any view
    flags, reasons = flag(ctx, [1, 4], [[2, 3, 4, -1], [6, 7, 0, 2]], np.zeros((2, 4)),
                          [0.5, 0.5], cfg)
    assert flags.tolist() == [[True, True, False, False], [False, False, False, False]]
    assert reasons[0, 0] == "mutual_neighbour" and reasons[1, 0] is None


def test_mutual_neighbour_rule_computes_whitened_lists_when_missing():
    from tests.mine.test_whitening import reference_whitened

    rng = np.random.default_rng(5)
    x = rng.normal(size=(40, 12)) / np.arange(1, 13)
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    sources = np.arange(40) // 2
    ctx = build_context(x, None, sources, FalseNegativeConfig(rules=("mutual-neighbour",)))
    ids = ctx.whitened_neighbours[0]
    z = reference_whitened(x)
    sims = z @ z.T
    sims[sources[:, None] == sources[None, :]] = -np.inf
    want = np.argsort(-sims, axis=1, kind="stable")[:, :10]
    assert ids.shape == (40, 10)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, want, strict=True)]) > 0.99


# -- config -------------------------------------------------------------------------
def test_defaults_are_known_rules():
    assert set(DEFAULT_RULES) <= set(RULES)
    assert FalseNegativeConfig().rules == DEFAULT_RULES
    assert parse_rules("label, cluster") == ("label", "cluster")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rules": ("label", "nope")}, "unknown false-negative rule 'nope'"),
        ({"margin": 0.0}, "--fn-margin must be in (0, 1], got 0.0"),
        ({"cluster_ks": (8, 16), "cluster_runs": 1, "cluster_votes": 3},
         "--fn-cluster-votes must be between 1 and the number of runs (2: "),
        ({"cluster_ks": (1,)}, "--fn-cluster-k: cluster counts must be >= 2, got 1"),
        ({"cluster_runs": 0}, "--fn-cluster-runs must be >= 1"),
        ({"cluster_max_share": 0.0}, "cluster max share must be in (0, 1]"),
    ],
)
def test_config_errors(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FalseNegativeConfig(**kwargs)


def test_bad_shapes_are_usage_errors():
    ctx = ctx_of(np.eye(3, dtype=np.float32), [0, 1, 2])
    cfg = FalseNegativeConfig(rules=("margin",))
    with pytest.raises(UsageError, match="cand_scores shape"):
        flag(ctx, [0], [[1, 2]], [[0.1]], [0.5], cfg)
    with pytest.raises(UsageError, match="row ids must be < 3"):
        flag(ctx, [0], [[1, 5]], [[0.1, 0.2]], [0.5], cfg)
    with pytest.raises(UsageError, match="row ids must be < 3"):  # the count itself
        flag(ctx, [0], [[1, 3]], [[0.1, 0.2]], [0.5], cfg)
    with pytest.raises(UsageError, match="row ids must be < 3"):
        flag(ctx, [3], [[1, 2]], [[0.1, 0.2]], [0.5], cfg)
    with pytest.raises(UsageError, match="unknown false-negative rule"):
        parse_rules("label,foo")


def test_trust_labels_lets_labels_decide_labelled_pairs():
    labels = np.array(["a", "a", "b", None], dtype=object)
    ctx = ctx_of(np.eye(4, dtype=np.float32), [0, 1, 2, 3], labels)
    cand, scores = [[1, 2, 3]], [[0.99, 0.99, 0.99]]
    # margin alone flags all three; with label on and trusted, the labelled
    # pair (0, 2) is kept (different labels) and (0, 3) is still judged by margin
    cfg = FalseNegativeConfig(rules=("label", "margin"))
    flags, reasons = flag(ctx, [0], cand, scores, [0.5], cfg)
    assert reasons.tolist() == [["label", None, "margin"]]
    cfg = FalseNegativeConfig(rules=("label", "margin"), trust_labels=False)
    flags, reasons = flag(ctx, [0], cand, scores, [0.5], cfg)
    assert reasons.tolist() == [["label|margin", "margin", "margin"]]


def test_community_rule_ignores_a_flooded_community():
    """Two tight groups joined by a chain: one community holding 3/4 of the items flags
    nothing when community_max_share is below 3/4, and flags its members above it."""
    from pairkit.mine import false_negatives as fnm

    ctx = fnm.FnContext.__new__(fnm.FnContext)
    ctx.communities = np.array([0, 0, 0, 1], dtype=np.int64)
    anchors = np.array([0, 3])
    cand = np.array([[1, 3], [0, -1]])
    low = fnm.FalseNegativeConfig(rules=("community",), community_max_share=0.5)
    high = fnm.FalseNegativeConfig(rules=("community",), community_max_share=0.8)
    np.testing.assert_array_equal(community.flag(ctx, anchors, cand, None, None, low, None),
                                  [[False, False], [False, False]])
    np.testing.assert_array_equal(community.flag(ctx, anchors, cand, None, None, high, None),
                                  [[True, False], [False, False]])
    # "more than" the share: a community holding exactly 3/4 (0.75 * 4 = 3 rows) flags
    at = fnm.FalseNegativeConfig(rules=("community",), community_max_share=0.75)
    np.testing.assert_array_equal(community.flag(ctx, anchors, cand, None, None, at, None),
                                  [[True, False], [False, False]])


def test_default_cluster_votes_every_run_with_diffusion_else_two_capped() -> None:
    from pairkit.mine.false_negatives import (
        DEFAULT_CLUSTER_DIFFUSION,
        DEFAULT_CLUSTER_VOTES,
        FalseNegativeConfig,
    )

    assert DEFAULT_CLUSTER_DIFFUSION == 0.4 and FalseNegativeConfig().cluster_diffusion == 0.4
    assert FalseNegativeConfig().cluster_votes == 8  # every run: the threshold does the rest
    assert FalseNegativeConfig(cluster_runs=3, cluster_ks=(4, 8)).cluster_votes == 6
    off = {"cluster_diffusion": 0.0}
    assert DEFAULT_CLUSTER_VOTES == 2 and FalseNegativeConfig(**off).cluster_votes == 2
    assert FalseNegativeConfig(cluster_runs=1, **off).cluster_votes == 1  # one run: one vote
    assert FalseNegativeConfig(cluster_runs=1, cluster_ks=(4, 8), **off).cluster_votes == 2
    assert FalseNegativeConfig(cluster_votes=3).cluster_votes == 3  # given: kept
    for bad in (-0.1, 1.5):
        with pytest.raises(UsageError, match="diffusion"):
            FalseNegativeConfig(cluster_diffusion=bad)


def test_near_duplicate_method_default_threshold_and_bad_value() -> None:
    import pytest

    from pairkit.errors import UsageError
    from pairkit.mine.false_negatives import FalseNegativeConfig

    assert FalseNegativeConfig().near_duplicate_method == "threshold"
    with pytest.raises(UsageError, match="near-duplicate method must be threshold, pixels or "
                                         "auto, got fast"):
        FalseNegativeConfig(near_duplicate_method="fast")


def test_cluster_runs_set_by_hand_take_the_votes_of_the_rule_without_threshold() -> None:
    """Runs set by hand have no spectral embedding, so no diffusion threshold: the default
    votes are then the rule's without it (2), not every run (which the threshold makes up
    for); votes given by hand are kept."""
    from dataclasses import replace

    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.fn_context import FnContext
    from pairkit.mine.rules import cluster

    n = 40
    assign = np.stack([np.arange(n) // 10, (np.arange(n) + 5) // 10 % 4,
                       np.arange(n) // 10, np.arange(n) // 10])
    anchors = np.array([0, 12])
    cand = np.array([[3, 6, 20], [15, 19, 33]])
    for votes, want in ((0, [[True, True, False], [True, True, False]]),
                        (4, [[True, False, False], [False, False, False]])):
        cfg = FalseNegativeConfig(rules=("cluster",), cluster_runs=4, cluster_votes=votes,
                                  cluster_max_share=1.0)
        ctx = FnContext(vectors=np.zeros((n, 2), np.float32), labels=None,
                        sources=np.arange(n), cluster_assign=assign)
        got = cluster.flag(ctx, anchors, cand, None, None, cfg, None)
        np.testing.assert_array_equal(got, want)
        assert cluster.diffusion_threshold(ctx, cfg) is None
        again = replace(cfg, margin=0.9)  # as the label-free estimate copies it
        fresh = FnContext(vectors=ctx.vectors, labels=None, sources=ctx.sources,
                          cluster_assign=assign)
        np.testing.assert_array_equal(cluster.flag(fresh, anchors, cand, None, None, again,
                                                   None), want)


def test_knn_neighbours_reuses_a_deep_enough_graph_only():
    """The caller's neighbour lists are cut to m when they hold at least m columns; lists
    shallower than m are searched again (exactly, other sources only), not handed out
    short."""
    from pairkit.mine.fn_context import knn_neighbours

    x = angles(0, 10, 25, 45, 70, 100)
    given = (np.array([[1], [0], [1], [2], [3], [4]]), np.ones((6, 1), np.float32))
    ctx = ctx_of(x, [0, 1, 2, 3, 4, 5], neighbours=given)
    ids, _ = knn_neighbours(ctx, 1)
    assert ids.tolist() == given[0].tolist()
    ids, scores = knn_neighbours(ctx, 2)
    assert ids.shape == (6, 2)
    assert ids[0].tolist() == [1, 2] and ids[3].tolist() == [2, 4]  # 45: 25 and 70 (20, 25)
    np.testing.assert_allclose(scores[0], [np.cos(np.radians(10)), np.cos(np.radians(25))],
                               atol=1e-6)
