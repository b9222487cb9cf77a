"""Mined positives: the mutual-neighbour test against sets built by hand and by brute
force, near-duplicate mates first, one entry per pair, the per-anchor cap, confidence."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.errors import UsageError
from pairkit.mine.positives import (
    PositiveConfig,
    mine_positives,
    mutual_neighbours,
)


def test_mutual_neighbours_by_hand() -> None:
    ids = np.array([[1, 2], [0, 2], [3, 0], [2, 1]])
    # 0-1: 1 lists 0; 0-2: 2 lists 0; 1-0 yes; 1-2: 2 lists 3, 0 -> no;
    # 2-3: 3 lists 2; 2-0 yes; 3-2 yes; 3-1: 1 lists 0, 2 -> no
    want = np.array([[True, True], [True, False], [True, True], [True, False]])
    np.testing.assert_array_equal(mutual_neighbours(ids), want)


def test_mutual_neighbours_padding_is_never_mutual() -> None:
    ids = np.array([[1, -1], [0, -1], [-1, -1]])
    np.testing.assert_array_equal(mutual_neighbours(ids),
                                  [[True, False], [True, False], [False, False]])


def test_mutual_neighbours_against_brute_force() -> None:
    rng = np.random.default_rng(0)
    n, m = 60, 5
    x = rng.normal(size=(n, 8))
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    ids = np.argsort(-sims, axis=1)[:, :m]
    lists = [set(r.tolist()) for r in ids]
    want = np.array([[i in lists[j] for j in ids[i]] for i in range(n)])
    np.testing.assert_array_equal(mutual_neighbours(ids), want)


@pytest.mark.parametrize("cells", [1, 7 * 25, 1 << 22])
def test_mutual_neighbours_by_chunks_against_brute_force(monkeypatch: pytest.MonkeyPatch,
                                                         cells: int) -> None:
    # rows looked up a few at a time (1 cell: one row per step; 175: 7 rows) give the
    # lists' brute-force answer, padded lists and a row listing itself included
    from pairkit.mine import positives

    monkeypatch.setattr(positives, "MUTUAL_CHUNK_CELLS", cells)
    rng = np.random.default_rng(1)
    n, m = 83, 5
    ids = rng.integers(0, n, size=(n, m))
    ids[rng.random((n, m)) < 0.2] = -1
    ids[3, 0] = 3
    lists = [set(r.tolist()) for r in ids]
    want = np.array([[j >= 0 and i in lists[j] for j in ids[i]] for i in range(n)])
    np.testing.assert_array_equal(positives.mutual_neighbours(ids), want)


def _lists() -> tuple[np.ndarray, np.ndarray]:
    # 4 items; row i's neighbours best first
    ids = np.array([[1, 2, 3], [0, 3, 2], [0, 3, 1], [1, 2, 0]])
    scores = np.array([[0.9, 0.8, 0.1], [0.9, 0.5, 0.4], [0.8, 0.7, 0.4], [0.5, 0.7, 0.1]],
                      dtype=np.float32)
    return ids, scores


def test_mine_positives_mutual_only_with_rank_confidence() -> None:
    ids, scores = _lists()
    got = mine_positives(np.array([0, 1]), ids, scores, PositiveConfig(per_anchor=10,
                                                                      neighbours=2))
    # top-2 lists: 0:[1,2] 1:[0,3] 2:[0,3] 3:[1,2]; mutual: 0-1 (yes), 0-2 (yes),
    # 1-0 (yes), 1-3 (yes)
    assert got.rows.tolist() == [0, 0, 1, 1]
    assert got.ids.tolist() == [1, 2, 0, 3]
    np.testing.assert_allclose(got.scores, [0.9, 0.8, 0.9, 0.5])
    np.testing.assert_allclose(got.confidence, [1.0, 0.5, 1.0, 0.5])  # 1 - rank / 2
    assert set(got.reasons) == {"mutual_neighbour"}


def test_mine_positives_cap_groups_first_and_cluster_confidence() -> None:
    ids, scores = _lists()
    groups = np.array([5, -1, -1, 5])  # 0 and 3 are near-duplicates
    vectors = np.eye(4, dtype=np.float32)
    assign = np.array([[0, 0, 1, 0], [0, 1, 1, 0]])  # runs of the cluster rule
    got = mine_positives(np.array([0, 3]), ids, scores,
                         PositiveConfig(per_anchor=2, neighbours=2), groups=groups,
                         vectors=vectors, cluster_assign=assign)
    # anchor 0: group mate 3 first (conf 1), then mutual 1 (agree 1 of 2 runs: 0.5) and 2
    # (0 of 2): cap 2 keeps 3 and 1. Anchor 3: mate 0; mutual (top-2 of 3 = [1, 2]):
    # 3-1? 1's top-2 is [0, 3] -> yes; 3-2? 2's is [0, 3] -> yes; confidences 3-1: runs
    # agree 1 (run 0) -> 0.5, 3-2: 0 -> 0.
    assert got.rows.tolist() == [0, 0, 1, 1]
    assert got.ids.tolist() == [3, 1, 0, 1]
    assert got.reasons.tolist() == ["near_duplicate", "mutual_neighbour",
                                    "near_duplicate", "mutual_neighbour"]
    np.testing.assert_allclose(got.confidence, [1.0, 0.5, 1.0, 0.5])
    np.testing.assert_allclose(got.scores[[0, 2]], [0.0, 0.0])  # eye vectors: cosine 0


def test_group_mates_of_the_anchors_own_source_are_no_mined_positives() -> None:
    """Found by a mine bug hunt (2026-12-06): a near-duplicate group holding both views of
    a source handed the anchor its own other view as a mined positive (reason
    near_duplicate): the view positive again, using up a --positives slot and counted in
    the stats. Mined positives are of other sources."""
    ids, scores = _lists()
    groups = np.array([5, 5, -1, 5])  # 0 and 1: two views of source 0; 3 copies them
    sources = np.array([0, 0, 1, 2])
    got = mine_positives(np.array([0, 3]), ids, scores,
                         PositiveConfig(per_anchor=1, neighbours=2), groups=groups,
                         vectors=np.eye(4, dtype=np.float32), sources=sources)
    # anchor 0: mates 1 (its own source: out) and 3 -> 3; anchor 3: mates 0 and 1, cap 1 -> 0
    assert got.rows.tolist() == [0, 1] and got.ids.tolist() == [3, 0]
    assert got.reasons.tolist() == ["near_duplicate", "near_duplicate"]


def test_mine_positives_off_and_bad_config() -> None:
    ids, scores = _lists()
    assert len(mine_positives(np.array([0]), ids, scores, PositiveConfig(per_anchor=0))) == 0
    with pytest.raises(UsageError, match="--positives must be >= 0, got -1"):
        PositiveConfig(per_anchor=-1).check()
    with pytest.raises(UsageError, match="--positive-neighbours must be >= 1, got 0"):
        PositiveConfig(neighbours=0).check()


@pytest.mark.parametrize("case", ["groups", "threshold", "rank-confidence"])
def test_mine_positives_in_chunks_of_anchors_equal_one_pass(monkeypatch, case) -> None:
    """Mined a few anchors at a time (the temporaries of a chunk, not of every anchor),
    the result is that of one pass: rows offset by each chunk's start, every array equal."""
    import pairkit.mine.positives as positives

    rng = np.random.default_rng(4)
    n, m = 300, 6
    x = rng.normal(size=(n, 12)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    ids = np.argsort(-sims, axis=1)[:, :m]
    scores = np.take_along_axis(sims, ids, 1).astype(np.float32)
    kw = {}
    if case == "groups":
        kw = {"groups": np.where(np.arange(n) % 7 == 0, np.arange(n) % 3, -1),
              "vectors": x, "cluster_assign": rng.integers(0, 4, size=(3, n))}
    elif case == "threshold":
        kw = {"near_duplicate_threshold": float(np.quantile(scores[:, 0], 0.8)),
              "cluster_assign": rng.integers(0, 4, size=(2, n))}
    anchors = np.sort(rng.choice(n, size=250, replace=False))
    cfg = PositiveConfig(per_anchor=4, neighbours=m)
    whole = mine_positives(anchors, ids, scores, cfg, **kw)
    monkeypatch.setattr(positives, "CHUNK_ANCHORS", 17)
    chunked = mine_positives(anchors, ids, scores, cfg, **kw)
    assert len(whole) > 100
    for name in ("rows", "ids", "scores", "confidence", "reasons"):
        a, b = getattr(whole, name), getattr(chunked, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


def test_near_duplicates_past_rank_zero_have_confidence_one() -> None:
    """A listed neighbour at the near-duplicate threshold is a near_duplicate of
    confidence 1 at any rank (not 1 - rank / m)."""
    ids = np.array([[1, 2], [0, 2], [0, 1]])
    scores = np.array([[0.99, 0.98], [0.99, 0.97], [0.98, 0.97]], np.float32)
    got = mine_positives(np.array([0, 1, 2]), ids, scores,
                         PositiveConfig(per_anchor=5, neighbours=2, whitening=0),
                         near_duplicate_threshold=0.95)
    assert got.rows.tolist() == [0, 0, 1, 1, 2, 2]
    assert got.ids.tolist() == [1, 2, 0, 2, 0, 1]
    assert set(got.reasons) == {"near_duplicate"}
    np.testing.assert_array_equal(got.confidence, np.ones(6, np.float32))


def test_a_score_exactly_at_the_near_duplicate_threshold_is_a_near_duplicate() -> None:
    ids = np.array([[1, 2], [0, 2], [0, 1]])  # every pair mutual
    scores = np.array([[0.5, 0.3], [0.5, 0.2], [0.3, 0.2]], np.float32)
    got = mine_positives(np.array([0, 1, 2]), ids, scores,
                         PositiveConfig(per_anchor=5, neighbours=2, whitening=0),
                         near_duplicate_threshold=0.5)
    assert got.rows.tolist() == [0, 0, 1, 1, 2, 2]
    assert got.ids.tolist() == [1, 2, 0, 2, 0, 1]
    assert got.reasons.tolist() == ["near_duplicate", "mutual_neighbour"] * 2 + [
        "mutual_neighbour"] * 2
    np.testing.assert_allclose(got.confidence, [1.0, 0.5, 1.0, 0.5, 1.0, 0.5])
