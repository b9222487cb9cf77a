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
