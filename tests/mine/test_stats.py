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
