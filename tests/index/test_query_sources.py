"""pairkit search by item id on a store with one big source (hunt-x 3): each query
fetches k + the size of its *own* source (or skips a big one), not k + the store's
largest source, in blocks of queries; the table is the brute-force one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pairkit.core.store import Store
from pairkit.index import query
from pairkit.index.open import Searcher
from pairkit.index.query import QueryRequest, search_store
from tests.index.test_query import brute

BIG = 300  # views of the big source


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(3)
    n_small = 100  # sources of two views, after the big one
    x = rng.normal(size=(BIG + 2 * n_small, 16)).astype(np.float32)
    x[BIG + 5] = x[BIG + 9]  # tied scores across sources
    src = ["big"] * BIG + [f"s{i // 2}" for i in range(2 * n_small)]
    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(len(x))], "source": src,
                          "view": 0, "label": "a"})
    return write_store(tmp_path_factory.mktemp("qs") / "s", x, items,
                       encoder={"name": "random"}, dtype="float32")


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(queries, k) of every search made."""
    calls: list[tuple[int, int]] = []
    search, outside = Searcher.search, Searcher.search_outside

    def recorded(self, queries, k, *rest):  # noqa: ANN001, ANN002, ANN202
        calls.append((len(queries), k))
        return (outside if rest else search)(self, queries, k, *rest)

    monkeypatch.setattr(Searcher, "search", lambda s, q, k: recorded(s, q, k))
    monkeypatch.setattr(Searcher, "search_outside",
                        lambda s, q, k, o, p: recorded(s, q, k, o, p))
    return calls


IDS = (BIG + 1, BIG + 5, BIG + 9, BIG + 150, 0, 17, BIG - 1)


@pytest.mark.parametrize("big", ["fetched", "skipped"])
@pytest.mark.parametrize("block", [1 << 23, 40])
def test_item_queries_fetch_their_own_source(store: Store, asked, big: str, block: int,  # noqa: ANN001
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries of two-view sources ask for k + 2, not k + 300 (failed before: every query
    asked k + 300); the big source's queries fetch it or skip it; tiny blocks too; the
    neighbours are the brute-force ones outside the query's source."""
    from pairkit.index import outside

    monkeypatch.setattr(query, "QUERY_BLOCK_ENTRIES", block, raising=False)
    if big == "skipped":  # and searched in a copy of the other rows
        monkeypatch.setattr(query, "OVER_FETCH_SOURCE", BIG // 2, raising=False)
        monkeypatch.setattr(outside, "OVER_FETCH_ROWS", 0)
    k = 6
    table = search_store(store, QueryRequest(ids=IDS, k=k))
    small = sum(1 for i in IDS if i >= BIG)
    near_k = len(IDS) if big == "skipped" else small
    assert sum(n for n, kk in asked if kk <= k + 2) == near_k, asked
    assert max(kk for n, kk in asked) == (k + 2 if big == "skipped" else k + BIG), asked
    if block == 40:
        assert max(n for n, kk in asked) <= max(1, 40 // k)
    v = store.vectors()
    src = store.source_codes()
    for q in IDS:
        got = table[table["query"] == f"id:{q}"]
        assert got["id"].tolist() == brute(v, v[q], src != src[q], k), q
        assert got["rank"].tolist() == list(range(k))
        np.testing.assert_allclose(got["score"], v[got["id"]] @ v[q], atol=1e-5)


def test_whole_store_source_has_no_neighbours(tmp_path: Path) -> None:
    """Every row in the query's source: no neighbour, whether fetched or skipped."""
    from pairkit.core.store_writer import write_store

    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(5)], "source": "one",
                          "view": range(5), "label": "a"})
    s = write_store(tmp_path / "s", x, items, encoder={"name": "random"}, dtype="float32")
    for over in (1024, 2):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(query, "OVER_FETCH_SOURCE", over, raising=False)
            table = search_store(s, QueryRequest(ids=(0, 3), k=3))
        assert len(table) == 0 and table.attrs["no_neighbours"] == ["id:0", "id:3"]
