"""A big group of identical rows (hunt-r 1): the streamed threshold path joins its pairs
in bounded pieces and chunks, and finds the same components and the same groups as an
exact reference (every pair at once, scipy's connected components)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse.csgraph as csgraph

import pairkit.index.range_search as range_search
import pairkit.mine.near_duplicates as near_duplicates
from pairkit.core.store import l2_normalize
from pairkit.mine.near_duplicate_check import ThresholdCheck
from pairkit.mine.near_duplicates import find_near_duplicates, near_components

T = 0.965


def big_group_rows(seed: int = 0) -> np.ndarray:
    """400 float32 unit rows of 16: 120 identical rows scattered among them, 12 small
    groups of near copies (2-5 rows each), the rest random."""
    rng = np.random.default_rng(seed)
    x = l2_normalize(rng.normal(size=(400, 16))).astype(np.float32)
    order = rng.permutation(400)
    x[order[:120]] = x[order[0]]  # the big group
    at = 120
    for size in [2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4, 5]:
        rows = order[at : at + size]
        x[rows] = l2_normalize(x[rows[0]] + 0.02 * rng.normal(size=(size, 16)))
        at += size
    return x


def reference_labels(x: np.ndarray) -> np.ndarray:
    """Each row's component by every pair at once, labelled by its smallest row."""
    sims = x @ x.T
    # no pair within float rounding of the threshold: the reference is exact
    assert np.abs(sims - np.float32(T)).min() > 1e-4
    _, comp = csgraph.connected_components(sims >= np.float32(T), directed=False)
    smallest = np.full(comp.max() + 1, len(x), dtype=np.int64)
    np.minimum.at(smallest, comp, np.arange(len(x)))
    return smallest[comp]


def test_components_match_every_pair_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # tiny pieces and chunks: many blocks and many merges (failed before: one block's
    # edges made one graph, of up to batch x group size edges)
    x = big_group_rows()
    ref = reference_labels(x)
    assert np.bincount(ref).max() == 120  # the big group is one component
    monkeypatch.setattr(range_search, "MAX_PAIRS", 50)
    monkeypatch.setattr(near_duplicates, "EDGE_CHUNK", 7)
    graphs: list[int] = []
    real = csgraph.connected_components

    def counting(graph: Any, **kwargs: Any) -> Any:
        graphs.append(int(graph.nnz))
        return real(graph, **kwargs)

    monkeypatch.setattr(csgraph, "connected_components", counting)
    got = near_components(len(x), ThresholdCheck(x, T, batch_size=32).edges(np.arange(400)))
    assert got.tolist() == ref.tolist()
    assert graphs and max(graphs) <= 7


def test_groups_are_the_same_in_small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    x = big_group_rows(1)
    sources = np.arange(len(x))
    whole = find_near_duplicates(x, T, sources=sources, batch_size=len(x), keep="central")
    monkeypatch.setattr(range_search, "MAX_PAIRS", 50)
    monkeypatch.setattr(near_duplicates, "EDGE_CHUNK", 7)
    pieces = find_near_duplicates(x, T, sources=sources, batch_size=32, keep="central")
    pd.testing.assert_frame_equal(pieces.table, whole.table)
    assert pieces.item_group.tolist() == whole.item_group.tolist()
    assert pieces.components_split == whole.components_split
    # and the groups lie within the reference's components, the big one whole
    ref = reference_labels(x)
    for _, g in pieces.table.groupby("group"):
        assert len(set(ref[g["id"].to_numpy()].tolist())) == 1
    assert pieces.table.groupby("group").size().max() == 120
