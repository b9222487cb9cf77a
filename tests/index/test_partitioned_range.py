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


def owners(x: np.ndarray, parts: Partitions) -> np.ndarray:
    """Each row's cluster, as the route pass computes it."""
    return route_block(RouteShared(x, parts.centroids, parts.bounds(0.9)), (0, len(x))).own


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
    own = owners(x, parts)
    across = {p for p in pair_set(self_pairs_blocks(x, 0.9)) if own[p[0]] != own[p[1]]}
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
    own = owners(x, parts)
    assert isinstance(parts, Partitions) and len(set(own.tolist())) == 2
    first = own[0]
    assert own.tolist() == [first] * 3 + [1 - first] * 2
    assert parts.members[first] == 3 and parts.members[1 - first] == 2
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
    assert route_block(shared, (0, 1)).parts.tolist() == [first]
    assert route_block(RouteShared(far, parts.centroids, bounds), (0, 1)).parts.tolist() == []
    # rows of norm 2 (M = 2): a pair at t = 3.92 has cosine >= t / M^2 = 0.98, so phi is
    # arccos(0.98) again (not arccos(t / M), which would route nothing outside a cluster)
    scaled = partition(2 * x, 2, map_here, block_rows=2)
    assert scaled.max_norm == pytest.approx(2.0, abs=1e-6)
    assert scaled.reach(3.92) == pytest.approx(np.arccos(0.98) + SLACK, abs=1e-6)


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


@pytest.mark.parametrize("chunk", [1024, 64])
def test_routes_that_differ_from_the_count_are_refused(monkeypatch, chunk):
    """The route pass must give the routes the count pass counted (else a cluster's
    slices of the route blocks would be misread): one route less, or one more, in one
    block of several, is refused."""
    import pairkit.index.partitioned_range as pr
    from pairkit.errors import PairkitError

    monkeypatch.setattr(pr, "MIN_CHUNK", chunk)
    x = data()
    plan = plan_partitions(x, 0.9, map_here, rows_per_part=60, block_rows=128)
    assert len(plan.blocks) == (5 if chunk == 64 else 1)
    last = plan.blocks[-1][0]
    real = pr.route_block
    first = real(pr.RouteShared(x, plan.parts.centroids, plan.parts.bounds(0.9)),
                 plan.blocks[0]).parts[0]
    changes = [lambda r, p, s: (r[1:], p[1:]) if s == last else (r, p),
               lambda r, p, s: (np.r_[r, r[:1]], np.r_[p, p[:1]]) if s == last else (r, p)]
    if chunk == 64:  # one route moved from the first block to the last: the totals agree
        changes.append(lambda r, p, s: (r[1:], p[1:]) if s == 0 else (
            (np.r_[r, s], np.r_[p, first]) if s == last else (r, p)))
    for change in changes:
        def changed(shared, span, c=change):
            got = real(shared, span)
            got.rows, got.parts = c(got.rows, got.parts, span[0])
            return got

        monkeypatch.setattr(pr, "route_block", changed)
        with pytest.raises(PairkitError, match="routed other rows than it counted"):
            list(plan_pairs(x, plan, map_here))


def recording(calls: list):
    """``map_here`` that lists ``(function name, result)`` of every block: what the
    driver receives from the blocks."""

    def map_blocks(fn, shared, blocks):
        for block in blocks:
            result = fn(shared, block)
            calls.append((fn.__name__, result))
            yield result

    return map_blocks


def test_route_files_give_the_same_pairs_and_only_counts_come_back(tmp_path, monkeypatch):
    """With the routes in files of a scratch folder (``dedup --ray``'s way), the pairs are
    those of the routes kept in memory; every route block returns its counts only (two
    (k,) arrays and a flag: no row id), and the folder is gone at the end."""
    import pairkit.index.partitioned_range as pr
    from pairkit.index.route_files import ROUTE

    monkeypatch.setattr(pr, "MIN_CHUNK", 64)
    x = data(n=900, seed=6)
    plan = plan_partitions(x, 0.9, map_here, rows_per_part=60, block_rows=128)
    assert len(plan.blocks) > 3 and plan.routed.shape == (len(plan.blocks), plan.members.size)
    want = list(pr.plan_pairs(x, plan, map_here, batch_size=50))
    calls: list = []
    seen: list = []
    real_read = pr.RoutesHere.read  # not used: the files are read instead
    got = []
    for pairs in pr.scratch_pairs(x, plan, recording(calls), batch_size=50,
                                  where=str(tmp_path)):
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        got.append(pairs)
    assert pr.RoutesHere.read is real_read
    assert [tuple(map(np.ndarray.tolist, p)) for p in got] == \
        [tuple(map(np.ndarray.tolist, p)) for p in want]
    assert pair_set(got) == pair_set(self_pairs_blocks(x, 0.9))
    k = plan.members.size
    routes = [r for name, r in calls if name == "write_routes"]
    assert len(routes) == len(plan.blocks)
    for routed, members, within in routes:  # counts only, never the routes
        assert routed.shape == members.shape == (k,) and within is True
    # the folder held one file of 12-byte records per block while the search ran
    folder = tmp_path / seen[0][0]
    assert seen[0][0].startswith(".dedup-routes.") and seen[0][0].endswith(".tmp")
    assert not folder.exists() and list(tmp_path.iterdir()) == []
    assert ROUTE.itemsize == 12


def test_scratch_removed_when_a_block_fails_or_the_caller_stops(tmp_path, monkeypatch):
    """The scratch folder is removed when a search block fails (the error reaches the
    caller) and when the caller stops reading the pairs early."""
    import pairkit.index.partitioned_range as pr

    monkeypatch.setattr(pr, "MIN_CHUNK", 64)
    x = data(n=900, seed=6)
    plan = plan_partitions(x, 0.9, map_here, rows_per_part=60, block_rows=128)

    def failing(fn, shared, blocks):
        for i, block in enumerate(blocks):
            if fn.__name__ == "search_part" and i == 2:
                assert len(list(tmp_path.iterdir())) == 1  # the routes, still there
                raise RuntimeError("a block failed")
            yield fn(shared, block)

    with pytest.raises(RuntimeError, match="a block failed"):
        list(pr.scratch_pairs(x, plan, failing, where=str(tmp_path)))
    assert list(tmp_path.iterdir()) == []
    stream = pr.scratch_pairs(x, plan, map_here, where=str(tmp_path))
    next(stream)
    assert len(list(tmp_path.iterdir())) == 1
    stream.close()
    assert list(tmp_path.iterdir()) == []


def test_a_row_outside_its_radius_is_refused(monkeypatch):
    """The route pass recomputes each row's cluster: a row whose angle to it exceeds the
    radius the assign pass measured (the passes' arithmetic differed) stops the run,
    even when the routes are the ones counted."""
    import pairkit.index.partitioned_range as pr
    from pairkit.errors import PairkitError

    x = data()
    plan = plan_partitions(x, 0.9, map_here, rows_per_part=60, block_rows=128)
    real = pr.own_angles
    monkeypatch.setattr(pr, "own_angles", lambda *a: (lambda o, g: (o, g + 0.01))(*real(*a)))
    with pytest.raises(PairkitError, match="routed other rows than it counted"):
        list(plan_pairs(x, plan, map_here))


def test_many_rows_cut_into_at_most_max_blocks(monkeypatch):
    """Past ``MAX_BLOCKS`` blocks of distances, a block holds several of them (the plan's
    counts stay blocks x clusters); the pairs are the same."""
    import pairkit.index.partitioned_range as pr

    x = data(n=900, seed=2)
    want = pair_set(partitioned_pairs(x, 0.9, map_here, rows_per_part=60, block_rows=128))
    monkeypatch.setattr(pr, "MIN_CHUNK", 50)
    monkeypatch.setattr(pr, "MAX_BLOCKS", 4)  # 18 blocks of distances of 50 rows: 4 blocks
    plan = plan_partitions(x, 0.9, map_here, rows_per_part=60, block_rows=50)
    assert plan.chunk == 50 and [b - a for a, b in plan.blocks] == [250, 250, 250, 150]
    got = pair_set(plan_pairs(x, plan, map_here))
    assert got == want


@pytest.mark.parametrize("threshold", [0.97, 0.0])
def test_zero_rows(threshold):
    """Zero rows (no direction: at a threshold > 0 they pair with nothing, and are routed
    nowhere) give the global search's pairs."""
    x = data(n=300, seed=7)
    x[[5, 77, 150]] = 0
    want = pair_set(self_pairs_blocks(x, threshold, batch_size=64))
    assert pair_set(partitioned_pairs(x, threshold, map_here, rows_per_part=40)) == want


def test_route_scratch_beside_the_output_never_the_store(tmp_path):
    """``dedup --ray`` keeps its route files beside its output (a local file's folder, a
    URL's prefix) and in the system's temp folder for standard output: never under the
    store it reads."""
    from pairkit.index.route_files import scratch_beside

    assert scratch_beside("-") is None
    assert scratch_beside(str(tmp_path / "groups.parquet")) == str(tmp_path.resolve())
    assert scratch_beside("s3://bucket/run/groups.parquet") == "s3://bucket/run"
    assert scratch_beside("s3://bucket/groups.parquet") == "s3://bucket"


def test_the_routes_scratch_folder_is_made_under_an_output_folder_yet_to_exist(tmp_path
                                                                               ) -> None:
    """Found by a bug hunt (2026-12-06): `dedup --ray -o NEW/DIR/out.parquet` stopped when
    the search went by partitions: the output's folder did not exist yet."""
    from pairkit.index.route_files import scratch_beside, scratch_routes

    where = scratch_beside(str(tmp_path / "new" / "dir" / "out.parquet"))
    files = scratch_routes(where)
    assert (tmp_path / "new" / "dir").is_dir() and str(tmp_path / "new" / "dir") in files.folder


def test_a_relative_output_gives_an_absolute_scratch_folder(tmp_path, monkeypatch) -> None:
    """Mutation audit 5a: the routes' folder is handed to Ray workers, whose working
    folder is not this one: ``-o out/groups.parquet`` gives the absolute folder."""
    from pairkit.index.route_files import scratch_beside

    monkeypatch.chdir(tmp_path)
    assert scratch_beside("out/groups.parquet") == str(tmp_path.resolve() / "out")
    assert scratch_beside("groups.parquet") == str(tmp_path.resolve())


def test_a_route_file_shorter_than_its_counts_is_an_error(tmp_path) -> None:
    """Mutation audit 5a: ranged reads of route files give records ``start .. start +
    count - 1`` of each block, in the order asked; a file cut short (a worker's write
    lost) is one error line, never fewer routes read as if complete."""
    from pairkit.errors import PairkitError
    from pairkit.index.route_files import ROUTE, RouteFiles

    files = RouteFiles(str(tmp_path))
    recs = [np.zeros(5, ROUTE), np.zeros(3, ROUTE)]
    for b, r in enumerate(recs):
        r.view(np.uint8)[:] = np.arange(r.nbytes, dtype=np.uint8) + 100 * b
        files.put(b, r)
    got = files.read(np.array([1, 0]), np.array([1, 2]), np.array([2, 3]))
    assert got.tobytes() == recs[1][1:3].tobytes() + recs[0][2:5].tobytes()
    name = files.name(0)
    with open(name, "r+b") as fh:
        fh.truncate(4 * ROUTE.itemsize)
    with pytest.raises(PairkitError, match="shorter than its counted routes"):
        files.read(np.array([0]), np.array([2]), np.array([3]))
