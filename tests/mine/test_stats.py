"""Mining statistics (pairkit/mine/stats.py) against numpy's own histogram and the plain
form of summary_stats they replaced."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.pairs import MinedPairs
from pairkit.mine.blocks import MineResult
from pairkit.mine.stats import RANK_BINS, rank_histogram, summary_stats


def test_rank_histogram_is_numpys() -> None:
    rng = np.random.default_rng(0)
    for top in (3, 40, 12_000, 60_000):
        ranks = rng.integers(0, top, 5000)
        edges = [*RANK_BINS, max(RANK_BINS[-1] + 1, int(ranks.max()) + 1)]
        np.testing.assert_array_equal(rank_histogram(ranks, edges),
                                      np.histogram(ranks, bins=edges)[0])
    assert rank_histogram(np.zeros(0, np.int64), [0, 1, 2]).tolist() == [0, 0]


def plain_stats(result: MineResult, K: int) -> dict:
    """The quantile, count and rank parts of summary_stats of commit 6cf7860."""
    p = result.pairs
    per = p.negatives_per_anchor
    qs = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)

    def quant(x: np.ndarray) -> dict | None:
        if len(x) == 0:
            return None
        return {f"q{int(q * 100):02d}": round(float(v), 6)
                for q, v in zip(qs, np.quantile(x.astype(np.float64), qs), strict=True)}

    ranks = p.neg_ranks[p.neg_ids >= 0]
    edges = [*RANK_BINS, max(RANK_BINS[-1] + 1, int(ranks.max()) + 1 if len(ranks) else 0)]
    return {"negatives": int(per.sum()), "anchors_short": int((per < K).sum()),
            "hist": np.bincount(per, minlength=K + 1).tolist(),
            "pos_score": quant(p.pos_scores), "neg_score": quant(p.neg_scores[p.neg_ids >= 0]),
            "ranks": np.histogram(ranks, bins=edges)[0].tolist()}


@pytest.mark.parametrize(("n", "short"), [(1000, 0.0), (1000, 0.3), (7, 0.0), (5, 1.0),
                                          (0, 0.0)])
def test_summary_stats_is_the_plain_form(n: int, short: float) -> None:
    rng = np.random.default_rng(n)
    K = 5
    ids = rng.integers(0, 10_000, (n, K))
    ids[rng.random((n, K)) < short] = -1
    scores = np.where(ids >= 0, rng.standard_normal((n, K)), np.nan).astype(np.float32)
    pairs = MinedPairs(np.arange(n), np.arange(n) ^ 1, rng.random(n).astype(np.float32), ids,
                       scores, np.where(ids >= 0, rng.integers(0, 3000, (n, K)), -1))
    kept = (pairs.pos_scores.copy(), pairs.neg_scores.copy())
    got = summary_stats(MineResult(pairs, {}, {}), K, True)
    want = plain_stats(MineResult(pairs, {}, {}), K)
    assert got["negatives"] == want["negatives"]
    assert got["anchors_short"] == want["anchors_short"]
    assert list(got["negatives_per_anchor"]["histogram"].values()) == want["hist"]
    assert got["pos_score"] == want["pos_score"] and got["neg_score"] == want["neg_score"]
    assert list(got["rank_histogram"].values()) == want["ranks"]
    # the scores themselves are left as they were (the quantiles partition a copy)
    np.testing.assert_array_equal(pairs.pos_scores, kept[0])
    np.testing.assert_array_equal(pairs.neg_scores, kept[1])


def test_summary_stats_by_hand() -> None:
    """Four anchors with 2, 2, 1 and 0 of K = 2 negatives: every count, the per-anchor
    mean/min/max, the score quantiles, the rank histogram's bins and their names, and the
    same-label share over the negatives whose two ends are labelled, worked out by hand."""
    from pairkit.mine.stats import same_label_record

    ids = np.array([[5, 6], [7, 8], [9, -1], [-1, -1]])
    scores = np.array([[0.9, 0.5], [0.8, 0.7], [0.6, np.nan], [np.nan, np.nan]], np.float32)
    ranks = np.array([[0, 3], [1, 12_000], [4, -1], [-1, -1]])
    pairs = MinedPairs(np.arange(4), np.array([4, 4, 4, 4]),
                       np.array([0.95, 0.85, 0.75, 0.65], np.float32), ids, scores, ranks)
    got = summary_stats(MineResult(pairs, {}, {}), 2, True)
    assert (got["anchors"], got["anchors_short"], got["anchors_without_negatives"],
            got["negatives"]) == (4, 2, 1, 5)
    assert got["negatives_per_anchor"] == {"mean": 1.25, "min": 0, "max": 2,
                                           "histogram": {"0": 1, "1": 1, "2": 2}}
    # sorted 0.5 0.6 0.7 0.8 0.9: numpy's linear quantiles
    assert got["neg_score"] == {"q00": 0.5, "q05": 0.52, "q25": 0.6, "q50": 0.7,
                                "q75": 0.8, "q95": 0.88, "q100": 0.9}
    hist = got["rank_histogram"]
    assert list(hist)[:3] == ["0", "1", "2-4"] and list(hist)[-2:] == ["1000-9999",
                                                                       "10000-12000"]
    assert {k: v for k, v in hist.items() if v} == {"0": 1, "1": 1, "2-4": 2,
                                                    "10000-12000": 1}
    # negatives (0,5) a-a, (0,6) a-?, (1,7) b-b, (1,8) b-a, (2,9) ?-?: 2 of 3 labelled
    labels = np.array(["a", "b", None, "a", None, "a", None, "b", "a", None], dtype=object)
    assert same_label_record(pairs, labels) == {"negatives_same_label": 0.6667,
                                                "negatives_labelled": 3}


def test_summary_lines_by_hand() -> None:
    """The person's summary of a stats dict: each figure in its place (the quantiles by
    name, the rank bins and removed counts that are not zero, the short anchors, the
    retries)."""
    from pairkit.mine.summary import summary_lines

    q = {"q00": 0.1, "q05": 0.15, "q25": 0.2, "q50": 0.3, "q75": 0.4, "q95": 0.45,
         "q100": 0.5}
    stats = {"rows": 1234, "format": "triplet", "anchors": 1000, "relation": "instance",
             "index": "flat", "negatives_per_anchor": {"mean": 4.5, "min": 0, "max": 5},
             "anchors_short": 7, "anchors_without_negatives": 2, "pos_score": q,
             "neg_score": {k: v - 0.1 for k, v in q.items()},
             "rank_histogram": {"0": 3, "1": 0, "2-4": 9},
             "removed": {"self": 1000, "same_source": 0, "positive": 12},
             "retries": 2, "anchors_retried": 5, "k_max": 64}
    assert summary_lines(stats, "out.csv") == [
        "mined 1,234 rows (triplet) for 1,000 anchors -> out.csv",
        "relation: instance; index: flat",
        "negatives per anchor: mean 4.50, min 0, max 5; 7 anchors with fewer than K",
        "positive scores: min 0.100  q25 0.200  median 0.300  q75 0.400  max 0.500",
        "negative scores: min 0.000  q25 0.100  median 0.200  q75 0.300  max 0.400",
        "negative rank histogram: 0: 3, 2-4: 9",
        "candidates removed: self 1,000, positive 12",
        "5 anchors searched again with a larger k (up to 64)",
    ]
    none = {**stats, "removed": {"self": 0}, "retries": 0, "rank_histogram": None,
            "pos_score": None}
    lines = summary_lines(none, "-")
    assert lines[0].endswith("-> stdout") and "candidates removed: none" in lines
    assert not any(x.startswith(("positive scores", "negative rank", "5 anchors"))
                   for x in lines)


def test_summary_has_no_empty_rank_histogram_line() -> None:
    """Found by a mine bug hunt (2026-12-07): a hard run whose anchors got no negative (a
    one-source store, one huge class, a filter nothing passes) printed the line
    ``negative rank histogram: `` with nothing after it (every bin 0): no line now, as
    for the score quantiles."""
    from pairkit.mine.summary import summary_lines

    stats = {"rows": 0, "format": "triplet", "anchors": 2, "relation": "instance",
             "index": "flat", "negatives_per_anchor": {"mean": 0.0, "min": 0, "max": 0},
             "anchors_short": 2, "pos_score": None, "neg_score": None,
             "rank_histogram": {"0": 0, "1": 0, "2-4": 0}, "removed": {"self": 2}}
    lines = summary_lines(stats, "-")
    assert not any(x.startswith("negative rank histogram") for x in lines), lines
