"""The label-free quality estimate of a run's false-negative rules."""

from __future__ import annotations

import numpy as np

from pairkit.mine.false_negatives import FalseNegativeConfig, FnContext
from pairkit.mine.fn_estimate import estimate_quality


def context(assign: list[int], sources: list[int], labels=None) -> FnContext:
    n = len(assign)
    x = np.eye(n, dtype=np.float32)
    ctx = FnContext(vectors=x, labels=None if labels is None else np.array(labels, object),
                    sources=np.asarray(sources, np.int64))
    ctx.cluster_assign = np.asarray([assign], np.int64)  # set by hand: no k-means
    return ctx


# the random-pair guard off: these hand-made clusters are the point of the tests
CLUSTER = FalseNegativeConfig(rules=("cluster",), cluster_ks=(2,), cluster_runs=1,
                              cluster_max_share=1.0)


def test_hidden_positive_recall_by_hand():
    # sources (0,1) (2,3) (4,5); clusters put 0,1 and 4,5 together, split 2 from 3
    ctx = context([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2])
    est = estimate_quality(ctx, CLUSTER, sample=100)
    assert est["anchors"] == 6
    assert est["hidden_positive_recall"] == round(4 / 6, 4)
    # the label rule is never part of the estimate (it would read the answer)
    with_label = FalseNegativeConfig(rules=("label", "cluster"), cluster_ks=(2,), cluster_runs=1)
    assert estimate_quality(ctx, with_label, sample=100)["hidden_positive_recall"] == round(
        4 / 6, 4)


def test_random_pair_rate_bounds_and_label_share():
    sources = list(np.arange(40) // 2)
    together = context([0] * 40, sources, labels=["a"] * 20 + ["b"] * 20)
    est = estimate_quality(together, CLUSTER, sample=40)
    assert est["hidden_positive_recall"] == 1.0 and est["random_pair_flag_rate"] == 1.0
    assert 0.0 < est["random_pair_same_label"] < 1.0
    apart = context(list(range(40)), sources)
    est = estimate_quality(apart, CLUSTER, sample=40)
    assert est["hidden_positive_recall"] == 0.0 and est["random_pair_flag_rate"] == 0.0
    assert "random_pair_same_label" not in est


def test_single_view_stores_have_no_hidden_positives():
    ctx = context([0, 0, 1, 1], [0, 1, 2, 3])
    est = estimate_quality(ctx, CLUSTER, sample=10)
    assert est["anchors"] == 0 and est["hidden_positive_recall"] is None
    assert est["random_pair_flag_rate"] is not None
    only_labels = FalseNegativeConfig(rules=("label",))
    assert estimate_quality(ctx, only_labels)["random_pair_flag_rate"] is None


def test_hidden_sources_give_the_mutual_rule_no_pairs():
    """The estimate hides the shared sources by giving every row its own. The
    mutual-neighbour rule's lists hold only rows of other sources, so it can never relate
    an anchor to its own source's other views (the only candidates the hidden context is
    offered): it flags none of them. It used to keep the run's source pairs, keyed by the
    run's source codes, and look them up by row: here the key of sources (0, 1) equals
    the key of rows (0, 1), the two views of source 0, which it flagged."""
    from pairkit.mine.rules.mutual import mutual_source_keys

    ctx = context([0, 1, 2, 3], [0, 0, 1, 1])
    ids = np.array([[2, 3], [3, 2], [0, 1], [1, 0]], np.int64)  # rows 0-2 and 1-3 mutual
    ctx.whitened_neighbours = (ids, np.ones(ids.shape, np.float32))
    mutual_source_keys(ctx)  # made with the run's sources, as the rule's prepare does
    assert ctx.mutual_source_keys.tolist() == [0 * 2 + 1, 1 * 2 + 0]
    rule = FalseNegativeConfig(rules=("mutual-neighbour",))
    est = estimate_quality(ctx, rule, sample=10)
    assert est["anchors"] == 4
    assert est["hidden_positive_recall"] == 0.0
    assert ctx.mutual_source_keys.tolist() == [1, 2]  # the run's own context keeps them


def old_estimate_recall(ctx: FnContext, config: FalseNegativeConfig, sample: int,
                        seed: int = 0) -> tuple[int, float]:
    """The hidden-positive part as it was before the cap: every row's source's rows as
    one dense (N, largest source) table, every other view offered. An independent
    reference for stores whose sources have <= 65 views."""
    from dataclasses import replace

    from pairkit.mine.false_negatives import flag_false_negatives
    from pairkit.mine.fn_context import source_views

    rng = np.random.default_rng([seed, 17])
    cfg = replace(config, rules=tuple(r for r in config.rules if r != "label"))
    views = source_views(replace(ctx, source_views=None))[ctx.sources]
    multi = np.flatnonzero((views >= 0).sum(axis=1) > 1)
    anchors = np.sort(rng.choice(multi, size=min(sample, len(multi)), replace=False))
    others = views[anchors]
    cand = np.where(others == anchors[:, None], -1, others)
    hidden = replace(ctx, sources=np.arange(ctx.count, dtype=np.int64), source_views=None,
                     source_index=None,
                     groups=None, pairwise_near_duplicates=True, paths=None,
                     mutual_source_keys=np.zeros(0, dtype=np.int64))
    x = ctx.vectors[anchors]
    rows = ctx.vectors[np.maximum(cand, 0).ravel()].reshape(*cand.shape, -1)
    sims = np.einsum("nd,nkd->nk", x, rows).astype(np.float32)
    scores = np.where(cand >= 0, sims, -np.inf).astype(np.float32)
    flags, _ = flag_false_negatives(hidden, anchors, cand, scores,
                                    np.full(len(anchors), np.nan, np.float32), cfg,
                                    [np.zeros(0, np.int64)] * len(anchors))
    return len(anchors), round(float(flags[cand >= 0].mean()), 4)


def random_store(views: list[int], d: int = 16, seed: int = 3) -> FnContext:
    rng = np.random.default_rng(seed)
    sources = np.repeat(np.arange(len(views)), views)
    rng.shuffle(sources)
    x = rng.normal(size=(len(sources), d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = np.array([f"c{s % 5}" for s in sources], object)
    ctx = FnContext(vectors=x, labels=labels, sources=sources.astype(np.int64))
    ctx.cluster_assign = rng.integers(0, 3, size=(2, len(sources)))  # two runs, by hand
    return ctx


RULES = FalseNegativeConfig(rules=("near-duplicate", "cluster", "label"), cluster_ks=(3,),
                            cluster_runs=2, cluster_max_share=1.0,
                            near_duplicate_threshold=0.3)


def test_ordinary_stores_give_the_estimate_they_gave_before_the_cap():
    """Sources of 1-4 views (and one of 65: 64 others, not capped): the same anchors, the
    same offered views, the same figures as the dense-table code."""
    for views, sample in [([1, 2, 3, 4] * 40, 2000), ([2, 4, 1, 3] * 60, 50),
                          ([1, 2] * 50 + [65], 80)]:
        ctx = random_store(views)
        est = estimate_quality(ctx, RULES, sample=sample)
        anchors, recall = old_estimate_recall(random_store(views), RULES, sample)
        assert (est["anchors"], est["hidden_positive_recall"]) == (anchors, recall)
        assert 0.0 < recall < 1.0  # the rules decide, not all or nothing
        assert est["random_pair_flag_rate"] is not None and "random_pair_same_label" in est


def test_one_huge_source_offers_at_most_the_cap_and_builds_no_dense_table(monkeypatch):
    """One source of 3,000 views among 1,000 single-view rows: the estimate used to build
    the (rows x largest source) table (4,000 x 3,000 int64, 96 MB) and score every anchor
    against all 2,999 other views. Now each anchor of it is offered 64 of them (distinct,
    of its source, never itself); small sources keep all of theirs."""
    import tracemalloc
    from dataclasses import replace

    import pairkit.mine.false_negatives as fn
    from pairkit.mine.fn_estimate import HIDDEN_POSITIVES_CAP

    ctx = random_store([3000] + [1] * 1000 + [2] * 50, d=8)
    offered = []
    real = fn.flag_false_negatives

    def spy(c, anchors, cand, *args, **kwargs):
        if len(c.sources) == ctx.count and c.sources[1] == 1 and c.sources[2] == 2:
            offered.append((anchors, cand))  # the hidden context: every row its source
        return real(c, anchors, cand, *args, **kwargs)

    monkeypatch.setattr(fn, "flag_false_negatives", spy)
    est = estimate_quality(ctx, RULES, sample=300)
    assert est["anchors"] == 300 and 0.0 < est["hidden_positive_recall"] < 1.0
    (anchors, cand), = offered
    big = ctx.sources[anchors] == np.argmax(np.bincount(ctx.sources))  # source 0
    assert big.sum() > 200 and cand.shape[1] <= HIDDEN_POSITIVES_CAP + 1
    for a, row, is_big in zip(anchors, cand, big, strict=True):
        row = row[row >= 0]
        assert len(set(row.tolist())) == len(row) and a not in row
        assert (ctx.sources[row] == ctx.sources[a]).all()
        assert len(row) == (HIDDEN_POSITIVES_CAP if is_big else 1)
    monkeypatch.setattr(fn, "flag_false_negatives", real)
    assert estimate_quality(ctx, RULES, sample=300) == est  # the draw is the estimate's own
    # memory: the rules' own once-per-context work done (a run's prepare), the estimate
    # itself now holds a few MB (the dense table alone was 4,100 x 3,000 x 8 B = 98 MB)
    clusters = replace(RULES, rules=("cluster",))
    estimate_quality(ctx, clusters, sample=300)
    tracemalloc.start()
    try:
        estimate_quality(ctx, clusters, sample=300)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak


def test_random_pair_label_share_is_over_pairs_of_two_sources_only():
    """A one-source store: every random pair is of one source, none is a pair to judge,
    so neither the flag rate nor the label share is given (the share was 1.0 over the
    anchors paired with padding). Two sources, labels a / b, every row of its own label:
    the share is 0 whatever pairs are drawn."""
    one = context([0] * 6, [0] * 6, labels=["a"] * 6)
    est = estimate_quality(one, CLUSTER, sample=6)
    assert est["random_pair_flag_rate"] is None and "random_pair_same_label" not in est
    two = context([0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1], labels=list("aaabbb"))
    est = estimate_quality(two, CLUSTER, sample=6)
    assert est["random_pair_same_label"] == 0.0
