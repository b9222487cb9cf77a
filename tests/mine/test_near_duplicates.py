"""Near-duplicate grouping against brute-force references and hand-built cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.sparse.csgraph import connected_components

from pairkit.core.store import l2_normalize
from pairkit.errors import PairkitError, UsageError
from pairkit.mine.near_duplicates import (
    find_near_duplicates,
    merge_edges,
    near_duplicate_groups,
)


def partition(groups: np.ndarray) -> set[frozenset[int]]:
    """Groups as a set of frozensets of item ids (items in no group left out)."""
    out: dict[int, set[int]] = {}
    for i, g in enumerate(groups.tolist()):
        if g >= 0:
            out.setdefault(g, set()).add(i)
    return {frozenset(s) for s in out.values()}


def brute_components(x: np.ndarray, t: float) -> set[frozenset[int]]:
    """Connected components (size >= 2) of the graph 'similarity >= t', dense."""
    adj = (x @ x.T) >= np.float32(t)
    _, lab = connected_components(adj, directed=False)
    return partition(np.where(np.bincount(lab)[lab] > 1, lab, -1))


def chain(n: int, step_deg: float = 30.0) -> np.ndarray:
    """Unit vectors in a plane, each ``step_deg`` from the previous one: a chain."""
    a = np.deg2rad(step_deg) * np.arange(n)
    return np.stack([np.cos(a), np.sin(a), np.zeros(n)], axis=1).astype(np.float32)


def test_merge_edges_is_union_find() -> None:
    labels = np.arange(6, dtype=np.int64)
    labels = merge_edges(labels, np.array([4, 1]), np.array([5, 2]))
    assert labels.tolist() == [0, 1, 1, 3, 4, 4]
    labels = merge_edges(labels, np.array([2]), np.array([5]))
    assert labels.tolist() == [0, 1, 1, 3, 1, 1]
    assert merge_edges(labels, np.array([1]), np.array([4])) is labels


def test_tight_clusters_match_brute_force_components() -> None:
    # Clusters so tight that every component is a clique: the chain guard must not split.
    rng = np.random.default_rng(0)
    centers = l2_normalize(rng.normal(size=(15, 32)))
    which = rng.integers(0, 15, 90)
    x = l2_normalize(centers[which] + 0.02 * rng.normal(size=(90, 32)))
    x = np.concatenate([x, l2_normalize(rng.normal(size=(30, 32)))])  # loners
    t = 0.97
    sims = x @ x.T
    ref = brute_components(x, t)
    for comp in ref:
        idx = sorted(comp)
        assert sims[np.ix_(idx, idx)].min() >= t  # cliques indeed
    res = find_near_duplicates(x, t, batch_size=7)
    assert partition(res.item_group) == ref
    assert res.components_split == 0


@pytest.mark.parametrize("keep", ["first", "central"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_groups_refine_components_and_respect_the_representative(keep: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = l2_normalize(rng.normal(size=(150, 6)))
    t = 0.9
    res = find_near_duplicates(x, t, keep=keep, batch_size=32)
    comps = brute_components(x, t)
    groups = partition(res.item_group)
    # every group lies inside one brute-force component
    for g in groups:
        assert any(g <= c for c in comps)
    table = res.table
    for _, g in table.groupby("group"):
        assert g["keep"].sum() == 1
        rep = int(g.loc[g["keep"], "id"].iloc[0])
        direct = x[g["id"].to_numpy()] @ x[rep]
        assert (direct[~g["keep"].to_numpy()] >= np.float32(t)).all()
        np.testing.assert_allclose(g.loc[~g["keep"], "similarity"], direct[~g["keep"]], atol=1e-6)
    # group ids are 0..G-1 ordered by the representative's id
    reps = table[table["keep"]].sort_values("group")["id"].to_numpy()
    assert (np.diff(reps) > 0).all() and table["group"].max() == len(reps) - 1
    # leftovers: nobody in no group is within t of another leftover's representative..
    # ..and each component ends covered (in groups or alone), never in two components
    assert set(np.unique(res.item_group)) <= set(range(-1, len(reps)))


def test_chain_guard_first_splits_central_keeps_whole() -> None:
    x = chain(3)  # a.b = cos 30 = 0.87, a.c = cos 60 = 0.5
    first = find_near_duplicates(x, 0.8, keep="first")
    assert first.item_group.tolist() == [0, 0, -1]
    assert first.components_split == 1
    central = find_near_duplicates(x, 0.8, keep="central")
    assert central.item_group.tolist() == [0, 0, 0]
    assert central.table.loc[central.table["keep"], "id"].tolist() == [1]
    assert central.components_split == 0
    # brute force without the guard would join all three
    assert brute_components(x, 0.8) == {frozenset({0, 1, 2})}


def test_long_chain_splits_into_pairs() -> None:
    res = find_near_duplicates(chain(4), 0.8)
    assert res.item_group.tolist() == [0, 0, 1, 1]
    c30 = np.cos(np.deg2rad(30))
    np.testing.assert_allclose(res.table["similarity"], [1.0, c30, 1.0, c30], atol=1e-6)


def test_exact_duplicates_by_hash() -> None:
    x = np.eye(6, dtype=np.float32)  # nothing is near anything
    sha = np.array(["aa", None, "aa", "bb", float("nan"), "bb"], dtype=object)
    res = find_near_duplicates(x, 0.9, file_sha256=sha)
    assert res.item_group.tolist() == [0, -1, 0, 1, -1, 1]
    assert res.table["match"].tolist() == ["keep", "exact", "keep", "exact"]
    assert res.table["id"].tolist() == [0, 2, 3, 5]
    # docs/formats.md: similarity 1.0 for exact copies (it was the vectors' cosine: 0 here,
    # 0.99998 for identical float16 rows)
    assert res.table["similarity"].tolist() == [1.0, 1.0, 1.0, 1.0]
    # missing hashes (None, "", NaN, pd.NA) are never equal to each other
    res = find_near_duplicates(x, 0.9, file_sha256=np.array([None, None, "", "", "c", "d"],
                                                              dtype=object))
    assert (res.item_group == -1).all()
    sha = pd.array(["aa", None, "aa", None, float("nan"), "bb"], dtype="string")
    assert near_duplicate_groups(x, 0.9, file_sha256=sha).tolist() == [0, -1, 0, -1, -1, -1]


def test_exact_only_ignores_similarity() -> None:
    x = np.zeros((3, 2), dtype=np.float32)
    x[:, 0] = 1.0
    sha = np.array(["a", "a", "b"], dtype=object)
    assert find_near_duplicates(x, 0.5, file_sha256=sha, near=False).item_group.tolist() == [
        0, 0, -1]
    assert find_near_duplicates(x, 0.5, file_sha256=sha).item_group.tolist() == [0, 0, 0]


def test_hash_copies_stay_together_under_the_chain_guard() -> None:
    # c is a byte copy of b and b is near a: c joins a's group with b ('near' to a).
    x = chain(3)
    x[2] = x[1]
    sha = np.array(["a", "b", "b"], dtype=object)
    res = find_near_duplicates(x, 0.8, file_sha256=sha)
    assert res.item_group.tolist() == [0, 0, 0]
    assert res.table["match"].tolist() == ["keep", "near", "near"]
    # a byte copy of the representative is 'exact'
    res = find_near_duplicates(x, 0.8, file_sha256=np.array(["b", "a", "b"], dtype=object))
    assert res.table["match"].tolist() == ["keep", "near", "exact"]
    assert res.table["id"].tolist() == [0, 1, 2]


def test_views_of_a_source_are_not_duplicates() -> None:
    rng = np.random.default_rng(0)
    base = l2_normalize(rng.normal(size=(3, 16)))
    # sources s0, s1, s2; view 1 of each is almost its view 0
    x = np.concatenate([base, l2_normalize(base + 0.01 * rng.normal(size=(3, 16)))])
    sources = np.array(["s0", "s1", "s2", "s0", "s1", "s2"], dtype=object)
    views = np.array([0, 0, 0, 1, 1, 1])
    assert (near_duplicate_groups(x, 0.9, sources=sources, views=views) == -1).all()
    # s2's view 0 copies s0's view 0: both sources (all their views) join one group
    x2 = x.copy()
    x2[2] = x2[0]
    groups = near_duplicate_groups(x2, 0.9, sources=sources, views=views)
    assert groups.tolist() == [0, -1, 0, 0, -1, 0]
    # a non-plain view that matches another source does not count
    x3 = x.copy()
    x3[4] = x3[0]
    assert (near_duplicate_groups(x3, 0.9, sources=sources, views=views) == -1).all()


def test_views_default_to_first_occurrence() -> None:
    x = np.eye(4, dtype=np.float32)
    x[3] = x[0]  # item 3 is view 1 of source b, item 1 is view 0 of b
    sources = np.array(["a", "b", "c", "b"], dtype=object)
    assert (near_duplicate_groups(x, 0.9, sources=sources) == -1).all()


def test_keep_largest_with_sizes() -> None:
    x = np.zeros((4, 2), dtype=np.float32)
    x[:, 0] = 1.0
    res = find_near_duplicates(x, 0.9, keep="largest", sizes=np.array([10.0, 50.0, 50.0, 5.0]))
    assert res.table.loc[res.table["keep"], "id"].tolist() == [1]  # tie 50/50: lowest id
    seen = []

    def sizes(ids: np.ndarray) -> np.ndarray:
        seen.append(ids.tolist())
        return ids.astype(float)

    y = np.concatenate([x, [[0.0, 1.0]]]).astype(np.float32)
    res = find_near_duplicates(y, 0.9, keep="largest", sizes=sizes)
    assert res.table.loc[res.table["keep"], "id"].tolist() == [3]
    assert sorted(seen[0]) == [0, 1, 2, 3]  # only items that have a duplicate are asked
    with pytest.raises(PairkitError, match="size unknown for 1 items"):
        find_near_duplicates(x, 0.9, keep="largest", sizes=np.array([1.0, np.nan, 1.0, 1.0]))


def test_keep_first_and_central_representatives() -> None:
    x = chain(3, step_deg=10.0)  # all within cos 20 = 0.94 of each other
    assert find_near_duplicates(x, 0.9).table["keep"].tolist() == [True, False, False]
    t = find_near_duplicates(x, 0.9, keep="central").table
    assert t.loc[t["keep"], "id"].tolist() == [1]
    c10 = np.cos(np.deg2rad(10))
    np.testing.assert_allclose(t["similarity"], [1.0, c10, c10], atol=1e-6)


@pytest.mark.parametrize("bad", [0.0, -0.2, 1.5, float("nan")])
def test_threshold_out_of_range(bad: float) -> None:
    with pytest.raises(UsageError, match=r"--threshold must be in \(0, 1\]"):
        near_duplicate_groups(np.eye(3, dtype=np.float32), bad)


def test_bad_keep_and_shapes() -> None:
    x = np.eye(3, dtype=np.float32)
    with pytest.raises(UsageError, match="--keep must be one of best, first, largest, central"):
        find_near_duplicates(x, 0.9, keep="biggest")
    with pytest.raises(UsageError, match="needs sizes"):
        find_near_duplicates(x, 0.9, keep="largest")
    with pytest.raises(PairkitError, match="sources has 2 entries"):
        find_near_duplicates(x, 0.9, sources=np.array(["a", "b"]))


def test_threshold_one_and_empty_input() -> None:
    x = np.zeros((3, 2), dtype=np.float32)
    x[:, 0] = 1.0
    assert near_duplicate_groups(x, 1.0).tolist() == [0, 0, 0]
    empty = near_duplicate_groups(np.zeros((0, 4), dtype=np.float32), 0.9)
    assert empty.dtype == np.int64 and empty.shape == (0,)
