"""The partitioned range search (pairkit/index/partitioned_range.py) finds exactly the
pairs of the global range search, each once, whatever the number of partitions: pairs
whose rows fall in different clusters included (the routes of the boundary)."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.blocks_here import map_here
from pairkit.core.row_view import RowView
from pairkit.index.partitioned_range import (
    SLACK,
    Partitions,
    RouteShared,
    partition,
    parts_for,
    plan_pairs,
    plan_partitions,
    route_block,
)
from pairkit.index.range_search import self_pairs_blocks


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


def partitioned_pairs(rows, threshold, map_blocks, *, stats=None, **plan_args):
    """The search by partitions whether or not the plan says it is worth it (``stats``:
    the plan's)."""
    batch_size = plan_args.pop("batch_size", 4096)
    plan = plan_partitions(rows, threshold, map_blocks, **plan_args)
    if stats is not None:
        stats.update(plan.stats())
    return plan_pairs(rows, plan, map_blocks, batch_size=batch_size)


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
    """Two clusters on a circle: the radii are the members' largest angles to their
    centroid, phi = arccos(t) for unit rows; a row is routed to a cluster when its angle
    to the centroid is within radius + phi (+ slack)."""
    angles = np.array([0.0, 0.1, 0.2, np.pi, np.pi + 0.3])
    x = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    parts = partition(x, 2, map_here, block_rows=2)
    assert isinstance(parts, Partitions) and len(set(parts.own.tolist())) == 2
    first = parts.own[0]
    assert parts.own.tolist() == [first] * 3 + [1 - first] * 2
    # the centroids are the mean directions 0.1 and pi + 0.15: radii 0.1 and 0.15
    assert parts.radii[first] == pytest.approx(0.1, abs=1e-5)
    assert parts.radii[1 - first] == pytest.approx(0.15, abs=1e-5)
    assert parts.max_norm == pytest.approx(1.0, abs=1e-6)
    assert parts.reach(0.98) == pytest.approx(np.arccos(0.98) + SLACK, abs=1e-6)
    assert parts.reach(0.0) == pytest.approx(np.pi)
    bounds = parts.bounds(0.98)
    assert bounds[first] == pytest.approx(np.cos(0.1 + np.arccos(0.98) + 2 * SLACK), abs=1e-6)
    # a row at angle 0.4 is routed to the first cluster (0.3 from its centroid, within
    # 0.1 + 0.2 + slack), one at 0.45 is not
    near, far = (np.array([[np.cos(a), np.sin(a)]], np.float32) for a in (0.4, 0.45))
    shared = RouteShared(near, parts.centroids, bounds)
    assert route_block(shared, (0, 1))[1].tolist() == [first]
    assert route_block(RouteShared(far, parts.centroids, bounds), (0, 1))[1].tolist() == []


def test_unclustered_rows_are_searched_globally(monkeypatch):
    """Rows with no cluster structure (Gaussian in 64 dims, a low threshold): the routes
    cover most clusters, so the plan is not worth it and ``pairs_here`` searches globally;
    clustered rows are searched by partitions. The pairs are the global search's either
    way."""
    import pairkit.index.partitioned_range as pr

    monkeypatch.setattr(pr, "LOCAL_MIN_ROWS", 100)
    monkeypatch.setattr(pr, "ROWS_PER_PART", 50)
    rng = np.random.default_rng(0)
    flat = unit(rng.normal(size=(800, 64)))
    plan = plan_partitions(flat, 0.3, map_here, rows_per_part=50)
    assert not plan.worth_it() and plan.work > 0.25 * 800**2
    assert "searched globally" in plan.describe()
    centers = rng.normal(size=(40, 64))
    clustered = unit(centers[rng.integers(0, 40, 2000)] + 0.05 * rng.normal(size=(2000, 64)))
    plan = plan_partitions(clustered, 0.95, map_here, rows_per_part=50)
    assert plan.worth_it(), plan.describe()
    calls = []
    real = pr.plan_pairs
    monkeypatch.setattr(pr, "plan_pairs", lambda *a, **k: calls.append(1) or real(*a, **k))
    for x, t, partitioned in ((flat, 0.3, False), (clustered, 0.95, True)):
        calls.clear()
        want = {p for p in pair_set(self_pairs_blocks(x, t))}
        got = {(a, b) for a, b, _ in zip(*(np.concatenate(c) for c in zip(*pr.pairs_here(
            x, x, t), strict=True)), strict=True) if a < b}
        assert got == want and len(want) > 100
        assert bool(calls) == partitioned


def test_a_row_view_gives_the_same_pairs():
    x = data(seed=3)
    view = RowView(x)
    want = pair_set(partitioned_pairs(x, 0.9, map_here, rows_per_part=80))
    assert pair_set(partitioned_pairs(view, 0.9, map_here, rows_per_part=80)) == want
    empty = pair_set(partitioned_pairs(x[:1], 0.9, map_here))
    assert empty == set()


def test_dedup_by_partitions_gives_the_global_groups(monkeypatch):
    """The local dedup (``find_near_duplicates`` with its default pair search) groups the
    same sources with the same leaders whether the search runs by partitions or
    globally."""
    import pandas as pd

    import pairkit.index.partitioned_range as pr
    from pairkit.mine.near_duplicates import find_near_duplicates

    x = data(n=900, seed=4)
    sources = np.arange(len(x)) // 3  # three views a source
    want = find_near_duplicates(x, 0.9, sources=sources, keep="central")
    calls = []
    real = pr.plan_pairs
    monkeypatch.setattr(pr, "LOCAL_MIN_ROWS", 10)
    monkeypatch.setattr(pr, "ROWS_PER_PART", 40)
    monkeypatch.setattr(pr, "WORK_GAIN", 0.0)
    monkeypatch.setattr(pr, "plan_pairs", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = find_near_duplicates(x, 0.9, sources=sources, keep="central")
    assert calls, "not searched by partitions"
    np.testing.assert_array_equal(got.item_group, want.item_group)
    pd.testing.assert_frame_equal(got.table, want.table)
    assert (want.item_group >= 0).sum() > 50


def test_routes_that_differ_from_the_count_are_refused(monkeypatch):
    """The route pass must give the routes the count pass counted (else a cluster's
    query list would hold unset rows): one route less, or one more, is refused."""
    import pairkit.index.partitioned_range as pr
    from pairkit.errors import PairkitError

    x = data()
    plan = plan_partitions(x, 0.9, map_here, rows_per_part=60, block_rows=128)
    real = pr.route_block
    for change in (lambda r, p: (r[1:], p[1:]), lambda r, p: (np.r_[r, r[:1]], np.r_[p, p[:1]])):
        monkeypatch.setattr(pr, "route_block", lambda shared, span, c=change: c(
            *real(shared, span)))
        with pytest.raises(PairkitError, match="routed other rows than it counted"):
            list(plan_pairs(x, plan, map_here))
