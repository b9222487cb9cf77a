"""The partitioned range search (pairkit/index/partitioned_range.py) finds exactly the
pairs of the global range search, each once, whatever the number of partitions: pairs
whose rows fall in different clusters included (the routes of the boundary)."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.row_view import RowView
from pairkit.index.partitioned_range import (
    Partitions,
    partition,
    partitioned_pairs,
    parts_for,
)
from pairkit.index.range_search import self_pairs_blocks
from pairkit.mine.blocks import map_here


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def data(n: int = 600, d: int = 16, seed: int = 0) -> np.ndarray:
    """Clusters, near-copies inside them, and copies of rows midway between two
    clusters (pairs that straddle a boundary)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(6, d))
    x = centers[rng.integers(0, 6, n)] + 0.7 * rng.normal(size=(n, d))
    x[: n // 10] = x[n // 10: n // 5] + 0.03 * rng.normal(size=(n // 10, d))
    mid = (centers[0] + centers[1]) / 2 + 0.2 * rng.normal(size=(20, d))
    x[-40:-20] = mid
    x[-20:] = mid + 0.05 * rng.normal(size=(20, d))
    return unit(x)


def pair_set(stream) -> set[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b, _ in stream:
        out += list(zip(a.tolist(), b.tolist(), strict=True))
    assert len(out) == len(set(out)), "a pair came out twice"
    return set(out)


@pytest.mark.parametrize("per_part", [10_000, 200, 60, 7])
@pytest.mark.parametrize("threshold", [0.9, 0.97])
def test_same_pairs_as_the_global_search(per_part, threshold):
    x = data()
    want = pair_set(self_pairs_blocks(x, threshold, batch_size=64))
    stats: dict = {}
    got = list(partitioned_pairs(x, threshold, map_here, rows_per_part=per_part,
                                 batch_size=50, block_rows=128, stats=stats))
    assert pair_set(got) == want and len(want) > 60
    for a, b, s in got:
        assert (a < b).all()
        np.testing.assert_allclose(s, np.einsum("ij,ij->i", x[a], x[b]), atol=1e-5)
    assert stats["parts"] <= parts_for(len(x), per_part)
    assert stats["routed"] >= len(x)  # every row searched by its own cluster at least
    if per_part == 60:
        assert stats["parts"] > 5  # really partitioned, and the routes prune
        assert stats["routed"] < 5 * len(x)


def test_pairs_across_a_boundary_are_found():
    """Pairs whose rows k-means puts in different clusters (the planted copies between
    two clusters, and others): every one found, once."""
    x = data()
    parts = partition(x, parts_for(len(x), 60), map_here, block_rows=100)
    across = {p for p in pair_set(self_pairs_blocks(x, 0.9))
              if parts.own[p[0]] != parts.own[p[1]]}
    assert len(across) >= 5
    got = pair_set(partitioned_pairs(x, 0.9, map_here, rows_per_part=60, block_rows=100))
    assert across <= got


def test_radii_and_reach_are_hand_checked():
    """Two clusters on a circle: the radii are the members' largest distances to their
    centroid, r = sqrt(2 - 2 t) for unit rows."""
    angles = np.array([0.0, 0.1, 0.2, np.pi, np.pi + 0.3])
    x = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    parts = partition(x, 2, map_here, block_rows=2)
    assert isinstance(parts, Partitions) and len(set(parts.own.tolist())) == 2
    for j in range(2):
        members = x[parts.own == j]
        want = np.linalg.norm(members - parts.centroids[j], axis=1).max()
        assert parts.radii[j] == pytest.approx(want, abs=1e-5)
    assert parts.max_norm == pytest.approx(1.0, abs=1e-6)
    assert parts.reach(0.98) == pytest.approx(np.sqrt(2 - 2 * 0.98), abs=2e-4)


def test_a_row_view_gives_the_same_pairs():
    x = data(seed=3)
    view = RowView(x)
    want = pair_set(partitioned_pairs(x, 0.9, map_here, rows_per_part=80))
    assert pair_set(partitioned_pairs(view, 0.9, map_here, rows_per_part=80)) == want
    empty = pair_set(partitioned_pairs(x[:1], 0.9, map_here))
    assert empty == set()
