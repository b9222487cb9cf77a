"""eval's search with exclusions on a query side with one big source (hunt-x, eval lead):
each query fetches k + *its own* excluded rows, not k + the largest source's, and the
neighbours are the brute-force ones."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.eval import neighbours
from pairkit.eval.neighbours import Exclusion, search_excluding
from pairkit.index.search import flat_index

BIG = 120


def one_big_source(seed: int, tie: bool) -> tuple[np.ndarray, np.ndarray]:
    """BIG rows of source 0 and 60 two-view sources, shuffled (the big source's queries
    spread over the blocks); with ``tie`` two rows of other sources equal."""
    rng = np.random.default_rng(seed)
    n = BIG + 2 * 60
    x = rng.normal(size=(n, 8)).astype(np.float32)
    if tie:
        x[BIG + 3] = x[BIG + 10]  # ties across sources
    groups = np.concatenate([np.zeros(BIG, np.int64), 1 + np.arange(2 * 60) // 2])
    perm = rng.permutation(n)
    return x[perm], groups[perm]


def searched(x: np.ndarray, k: int, excl: Exclusion, block_rows: int,
             monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The ids of eval's search with ``excl``, and each knn_search call's (queries, k)."""
    calls: list[tuple[int, int]] = []
    real = neighbours.knn_search

    def recorded(q, index, kk, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append((len(q), kk))
        return real(q, index, kk, **kw)

    monkeypatch.setattr(neighbours, "knn_search", recorded)
    got = np.concatenate([ids for _, _, ids in search_excluding(
        x, flat_index(x), len(x), k, excl, block_rows=block_rows)])
    return got, calls


def assert_brute_force(got: np.ndarray, x: np.ndarray, groups: np.ndarray, k: int) -> None:
    """Each row's ids are its k nearest rows of other groups (ties by row)."""
    s = x.astype(np.float64) @ x.astype(np.float64).T
    n = len(x)
    for r in range(n):
        order = np.lexsort((np.arange(n), -s[r]))
        want = [int(j) for j in order if groups[j] != groups[r]][:k]
        assert got[r].tolist() == want, r


@pytest.mark.parametrize("block_rows", [4096, 16])
def test_each_query_fetches_its_own_excluded_rows(block_rows: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries as gallery (self rows and sources excluded): those of two-view sources ask
    for k + 4 (two rows of their source, one for themselves, rounded up), the big source's
    for k + BIG + 1 (failed before: every query k + BIG + 1); brute-force neighbours."""
    x, groups = one_big_source(5, tie=True)
    n, k = len(x), 5
    got, calls = searched(x, k, Exclusion(np.arange(n), groups, groups), block_rows,
                          monkeypatch)
    assert sum(q for q, kk in calls if kk <= k + 4) == n - BIG, calls
    assert max(kk for _, kk in calls) == k + BIG + 1
    assert_brute_force(got, x, groups, k)


@pytest.mark.parametrize("block_rows", [4096, 16])
@pytest.mark.parametrize("self_rows", [True, False])
def test_a_big_source_is_skipped_by_the_exact_search(block_rows: int, self_rows: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A source of more than ``OVER_FETCH_ROWS`` references is skipped by the exact search
    (its queries searched among the other sources' rows), not fetched: no query asks for
    more than k + 4 (failed before: the big source's queries asked for k + BIG + 1);
    the neighbours are the brute-force ones, the query's own row left out too."""
    from pairkit.index import outside

    monkeypatch.setattr(outside, "OVER_FETCH_ROWS", BIG // 2)
    x, groups = one_big_source(6, tie=False)
    n, k = len(x), 5
    got, calls = searched(x, k, Exclusion(np.arange(n) if self_rows else None, groups, groups),
                          block_rows, monkeypatch)
    assert max(kk for _, kk in calls) <= k + 4, calls
    assert_brute_force(got, x, groups, k)


def test_rows_without_a_source_code_exclude_nothing_but_themselves() -> None:
    """Codes < 0 (no source) never match: two rows without a source see each other,
    rows of one source don't (brute force over a handful of rows)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(7, 4)).astype(np.float32)
    groups = np.array([-1, -1, 0, 0, 1, -1, 1], dtype=np.int64)
    n, k = len(x), 6
    got = np.concatenate([ids for _, _, ids in search_excluding(
        x, flat_index(x), n, k, Exclusion(np.arange(n), groups, groups))])
    s = x.astype(np.float64) @ x.astype(np.float64).T
    for r in range(n):
        order = np.lexsort((np.arange(n), -s[r]))
        want = [int(j) for j in order
                if j != r and not (groups[r] >= 0 and groups[j] == groups[r])][:k]
        assert got[r].tolist() == want + [-1] * (k - len(want)), r
    assert set(got[0]) >= {1, 5}  # the two other rows without a source
