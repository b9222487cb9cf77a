"""Mining statistics (pairkit/mine/stats.py) against numpy's own histogram."""

from __future__ import annotations

import numpy as np

from pairkit.mine.stats import RANK_BINS, rank_histogram


def test_rank_histogram_is_numpys() -> None:
    rng = np.random.default_rng(0)
    for top in (3, 40, 12_000, 60_000):
        ranks = rng.integers(0, top, 5000)
        edges = [*RANK_BINS, max(RANK_BINS[-1] + 1, int(ranks.max()) + 1)]
        np.testing.assert_array_equal(rank_histogram(ranks, edges),
                                      np.histogram(ranks, bins=edges)[0])
    assert rank_histogram(np.zeros(0, np.int64), [0, 1, 2]).tolist() == [0, 0]
