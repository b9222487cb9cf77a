"""Hard negatives on a store with one big source (hunt-x 4): each anchor's first search
fetches k + its *own* exclusion set (its source, its positives), not k + the largest
source's size for every anchor (one source of 10,000 views in a 25,000-row store made
every anchor fetch ~20,000 candidates: 5.2 GB). The table is the one of the old search
(every anchor the largest k) and of a brute-force reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pairkit.index.options import IndexOptions
from pairkit.index.search import knn_search
from pairkit.mine import hard_negatives, selection
from pairkit.mine.config import MineConfig
from pairkit.mine.false_negatives import FalseNegativeConfig
from tests.mine.test_hard_negatives import reference

BIG = 200  # views of the big source
SMALL = 150  # sources of two views


def big_source_store(path: Path, big: int = BIG, seed: int = 0,  # noqa: ANN201
                     mixed: bool = False):
    """A store of ``big`` views of one source and :data:`SMALL` sources of two views,
    four classes, 16-d clustered vectors; ``mixed``: the big source's views of all four
    classes (else all of class 0)."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(4, 16))
    rows, items = [], []
    for v in range(big):
        rows.append(centers[0] + 0.6 * rng.normal(size=16))
        items.append({"path": f"big/{v}.jpg", "source": "big", "view": v,
                      "label": f"c{v % 4}" if mixed else "c0"})
    for s in range(SMALL):
        c = s % 4
        base = centers[c] + 0.5 * rng.normal(size=16)
        for v in range(2):
            rows.append(base + 0.1 * rng.normal(size=16))
            items.append({"path": f"s{s}/{v}.jpg", "source": f"s{s}", "view": v,
                          "label": f"c{c}"})
    return write_store(path, np.asarray(rows, dtype=np.float32), pd.DataFrame(items),
                       encoder={"name": "random"}, dtype="float32")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return big_source_store(tmp_path_factory.mktemp("big") / "s")


@pytest.fixture(scope="module")
def mixed_store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return big_source_store(tmp_path_factory.mktemp("mixed") / "s", mixed=True)


@pytest.mark.parametrize("cfg", [MineConfig(num_negatives=5),
                                 MineConfig(num_negatives=3, range_min=2, range_max=8)])
def test_small_sources_fetch_near_k_and_match_brute_force(store, cfg: MineConfig) -> None:  # noqa: ANN001
    """The anchors of two-view sources are searched with k near the window, not with the
    big source's size (failed before: every anchor asked for k > 400); the negatives are
    the brute-force ones."""
    from pairkit.core.relations import build_relation

    x = store.vectors(np.float32)
    calls: list[tuple[int, int]] = []

    def searcher(q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        calls.append((len(q), k))
        return knn_search(q, x, k)

    sources = pd.factorize(store.items["source"])[0]
    rel = build_relation("instance", store.items)
    res = hard_negatives.mine_negatives(x, sources, rel, cfg, searcher)
    asked_big = sum(n for n, k in calls if k > BIG)
    assert asked_big <= BIG, calls  # only the big source's anchors fetch past it
    small_k = max(k for n, k in calls if k <= BIG)
    assert small_k <= 4 * cfg.window()[1] + 8, calls
    want = reference(x, store.items, "instance", cfg)
    p = res.pairs
    for row, a in enumerate(p.anchors):
        got = [int(i) for i in p.neg_ids[row] if i >= 0]
        assert got == want[int(a)], a


def mine(store, relation: str, cfg: MineConfig,  # noqa: ANN001, ANN201
         fn_config: FalseNegativeConfig | None):
    from pairkit.mine.command import mine_store

    return mine_store(store, relation, cfg, IndexOptions(kind="flat"), fn_config)


CASES = [
    ("instance", MineConfig(num_negatives=5), None),
    ("instance", MineConfig(num_negatives=5), FalseNegativeConfig()),
    ("instance", MineConfig(num_negatives=5, fn_mode="attract"), FalseNegativeConfig()),
    ("instance", MineConfig(num_negatives=5),
     FalseNegativeConfig(rules=("near-duplicate", "mutual-neighbour"))),
    ("instance", MineConfig(num_negatives=5),
     FalseNegativeConfig(rules=("near-duplicate", "mutual-neighbour", "cluster"))),
    ("instance", MineConfig(num_negatives=5, sampling="softmax", sampling_temperature=0.1,
                            batch_size=64), None),
    ("instance", MineConfig(num_negatives=4, hard=False), None),
    ("label", MineConfig(num_negatives=5), None),
    ("label", MineConfig(num_negatives=5, fn_mode="keep"), FalseNegativeConfig()),
]


@pytest.fixture(params=["fetched", "skipped"])
def big_source(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The big source fetched and dropped (it is under ``MIN_SKIPPED_GROUP`` rows), or
    skipped by the exact search (the threshold lowered under it)."""
    from pairkit.mine import group_skip

    if request.param == "skipped":
        monkeypatch.setattr(group_skip, "MIN_SKIPPED_GROUP", BIG // 2)
    return str(request.param)


@pytest.mark.parametrize("labels", ["one", "mixed"])
@pytest.mark.parametrize(("relation", "cfg", "fn_config"), CASES)
def test_the_table_is_the_one_of_the_largest_k(store, mixed_store, relation: str,  # noqa: ANN001
                                              cfg: MineConfig, fn_config, big_source: str,
                                              labels: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The same table (rows, ids, ranks, flags; scores to float rounding) as when every
    anchor fetches k + the largest source (the code before), for both relations, false-
    negative rules off and on (attracted rows too), easy negatives and small blocks, the
    big source of one label or of all four; with the big source skipped by the search, no
    anchor fetches it (instance relation), the ``label`` and ``cluster`` rules' own
    searches (which skip the anchor's label, its clusters) included (failed before: their
    anchors fetched k + 256)."""
    store = store if labels == "one" else mixed_store
    got, stats = mine(store, relation, cfg, fn_config)
    if big_source == "skipped" and relation == "instance" and cfg.hard:
        assert stats["k_initial"] < BIG, stats
        assert stats["retries"] == 0 or fn_config is not None, stats  # flags need more
    monkeypatch.setattr(hard_negatives, "skips_sources", lambda *a: None)
    monkeypatch.setattr(hard_negatives, "sources_skipped_by", lambda c, s, a, r: (a, None))

    def largest(*args) -> np.ndarray:  # noqa: ANN002
        return selection.initial_k(*args[:7])  # no anchors: every one the largest k

    monkeypatch.setattr(hard_negatives, "initial_k", largest)
    want, before = mine(store, relation, cfg, fn_config)
    assert stats["k_initial"] <= before["k_initial"]
    assert list(got.columns) == list(want.columns)
    scores = [c for c in got.columns if c.endswith("score")]
    pd.testing.assert_frame_equal(got.drop(columns=scores), want.drop(columns=scores))
    np.testing.assert_allclose(got[scores].to_numpy(float), want[scores].to_numpy(float),
                               atol=1e-6)


def other_source_brute(x: np.ndarray, sources: np.ndarray, m: int) -> np.ndarray:
    """(N, m) each row's m nearest rows of other sources, ties by id, -1 padded."""
    out = np.full((len(x), m), -1, np.int64)
    s = x.astype(np.float64) @ x.astype(np.float64).T
    for r in range(len(x)):
        order = np.lexsort((np.arange(len(x)), -s[r]))
        hits = [int(j) for j in order if sources[j] != sources[r]][:m]
        out[r, :len(hits)] = hits
    return out


def recorded_searches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Each ``Searcher.search`` call's (queries, k) from now on, in a list that grows."""
    from pairkit.index.open import Searcher

    calls: list[tuple[int, int]] = []
    real = Searcher.search

    def recorded(self, q, k):  # noqa: ANN001, ANN202
        calls.append((len(q), k))
        return real(self, q, k)

    monkeypatch.setattr(Searcher, "search", recorded)
    return calls


@pytest.mark.parametrize("big", ["fetched", "skipped"])
@pytest.mark.parametrize("graph", ["knn_graph", "knn_graph_approx"])
def test_rule_graphs_search_each_row_to_its_own_source(store, graph: str, big: str,  # noqa: ANN001
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules' kNN graphs of other sources search a row of a two-view source m + 2
    deep, not m + the big source (failed before: every row m + 200), the big source's
    rows in blocks, or the big source skipped by the exact search; the lists are the
    brute-force ones."""
    from pairkit.index import outside

    if big == "skipped":
        monkeypatch.setattr(outside, "OVER_FETCH_ROWS", BIG // 2)
    from pairkit.index import search
    from pairkit.mine import clusters, spectral

    x = store.vectors(np.float32)
    sources = pd.factorize(store.items["source"])[0].astype(np.int64)
    calls: list[tuple[int, int]] = []
    real = search.knn_search

    def recorded(q, index, k, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append((len(q), k))
        return real(q, index, k, **kw)

    monkeypatch.setattr(search, "knn_search", recorded)
    monkeypatch.setattr(clusters, "WIDTH_BLOCK_ENTRIES", 3000)  # the deep rows in blocks
    m = 5
    if graph == "knn_graph":
        ids, _ = clusters.knn_graph(x, sources, m)
    else:
        ids, _ = spectral.knn_graph_approx(x, sources, np.arange(len(x)), m, block=64)
    deep = [(n, k) for n, k in calls if k > m + 2]
    assert sum(n for n, k in deep) == (0 if big == "skipped" else BIG), calls
    assert max((n * k for n, k in deep), default=0) <= 3000, calls
    np.testing.assert_array_equal(ids, other_source_brute(x, sources, m))


@pytest.mark.parametrize("big", ["fetched", "skipped"])
def test_rule_lists_search_each_row_to_its_own_source(store, big: str,  # noqa: ANN001
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules' neighbour lists through mine's index (exact here) search a row of a
    two-view source m + 2 deep (failed before: every row m + 200), the big source in
    blocks or skipped; brute-force lists."""
    from pairkit.index import outside

    if big == "skipped":
        monkeypatch.setattr(outside, "OVER_FETCH_ROWS", BIG // 2)
    from pairkit.mine import clusters
    from pairkit.mine.rules_run import search_neighbour_lists

    x = store.vectors(np.float32)
    sources = pd.factorize(store.items["source"])[0].astype(np.int64)
    calls = recorded_searches(monkeypatch)
    monkeypatch.setattr(clusters, "WIDTH_BLOCK_ENTRIES", 3000)  # the deep rows in blocks
    m = 5
    ids, scores = search_neighbour_lists(x, sources, m, IndexOptions(kind="flat"), None, None)
    deep = [(n, k) for n, k in calls if k > m + 2]
    assert sum(n for n, k in deep) == (0 if big == "skipped" else BIG), calls
    assert max((n * k for n, k in deep), default=0) <= 3000, calls
    np.testing.assert_array_equal(ids, other_source_brute(x, sources, m))
    np.testing.assert_allclose(scores, np.take_along_axis(x @ x.T, ids, 1), atol=1e-5)


@pytest.mark.parametrize("big", ["fetched", "deep"])
def test_approximate_rule_lists_search_the_big_source_alone_deep(store, big: str,  # noqa: ANN001
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """Through an approximate index (IVF, every cell probed: the exact lists) the rules'
    neighbour lists search every row m + the largest source while no source is big (as
    before); with a source over ``OVER_FETCH_ROWS`` rows only its rows are searched that
    deep, the others m + the largest of the rest (failed before: every row m + 200)."""
    from pairkit.index import outside
    from pairkit.mine.rules_run import search_neighbour_lists

    if big == "deep":
        monkeypatch.setattr(outside, "OVER_FETCH_ROWS", BIG // 2)
    x = store.vectors(np.float32)
    sources = pd.factorize(store.items["source"])[0].astype(np.int64)
    calls = recorded_searches(monkeypatch)
    m = 5
    ids, _ = search_neighbour_lists(x, sources, m, IndexOptions(kind="ivf", nlist=4, nprobe=4),
                                    None, None)
    deep = sum(n for n, k in calls if k > m + 2)
    assert deep == (BIG if big == "deep" else len(x)), calls
    np.testing.assert_array_equal(ids, other_source_brute(x, sources, m))


@pytest.mark.parametrize("options", [IndexOptions(kind="ivfpq", nlist=4, nprobe=2, pq_m=4),
                                     IndexOptions(kind="ivf", nlist=4, nprobe=2, float16=True),
                                     IndexOptions(kind="hnsw", ef_search=16)])
def test_rule_lists_of_k_dependent_indices_search_every_row_as_deep(tmp_path: Path, options,  # noqa: ANN001
                                                                    monkeypatch) -> None:  # noqa: ANN001
    """Where an approximate search's first hits depend on its k (IVF-PQ and float16
    indices re-score a deeper k's candidates exactly, HNSW's search list grows with k),
    every row is searched m + the largest source deep whatever the big sources, as before
    the big-source change (helper-75's D1: an IVF-PQ table of 40,000 rows became 63,864,
    the mutual-neighbour rule's random-pair guard decided otherwise)."""
    from pairkit.index import outside
    from pairkit.mine.rules_run import search_neighbour_lists

    big = 800  # IVF-PQ wants 1,000 rows: 800 views of one source and 150 two-view ones
    store = big_source_store(tmp_path / "s", big=big)
    monkeypatch.setattr(outside, "OVER_FETCH_ROWS", big // 2)  # the big source is big
    x = store.vectors(np.float32)
    sources = pd.factorize(store.items["source"])[0].astype(np.int64)
    calls = recorded_searches(monkeypatch)
    m = 5
    search_neighbour_lists(x, sources, m, options, None, None)
    assert {k for _, k in calls} == {m + big}, calls
    assert sum(n for n, _ in calls) == len(x)


JUDGED_CASES = [
    (MineConfig(num_negatives=5), FalseNegativeConfig()),
    (MineConfig(num_negatives=5, fn_mode="attract"), FalseNegativeConfig()),
    (MineConfig(num_negatives=5, fn_mode="keep"), FalseNegativeConfig()),
    (MineConfig(num_negatives=3, range_min=2, range_max=8, sampling="softmax",
                sampling_temperature=0.1), FalseNegativeConfig()),
]


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.parametrize(("cfg", "fn_config"), JUDGED_CASES)
def test_rules_judge_each_row_up_to_its_window(mixed_store, kind: str, cfg: MineConfig,  # noqa: ANN001
                                               fn_config: FalseNegativeConfig,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The false-negative rules judge each row's candidates in growing column chunks,
    up to the one completing its window (selection.flags_until): the same table (rows,
    ids, ranks, flags, reasons, attracted rows, scores) as judging every fetched
    candidate, with far fewer judged where an anchor fetched thousands (the big source's
    anchors with the IVF index: their k grows with the source; failed before: every
    candidate of every row was judged)."""
    from pairkit.mine.command import mine_store

    index = IndexOptions(kind=kind, nlist=8 if kind == "ivf" else None,
                         nprobe=2 if kind == "ivf" else None)
    judged: list[int] = []
    real = selection.filter_kept

    def counting(fn, anchors, ids, *rest):  # noqa: ANN001, ANN002, ANN202
        judged.append(int(ids.size))
        return real(fn, anchors, ids, *rest)

    monkeypatch.setattr(selection, "filter_kept", counting)
    monkeypatch.setattr(selection, "FIRST_COLUMNS", 1)  # many chunks: 2 x the need first
    got, _ = mine_store(mixed_store, "instance", cfg, index, fn_config)
    chunked = sum(judged)
    judged.clear()
    monkeypatch.setattr(selection, "FIRST_COLUMNS", 10**9)  # every column at once
    want, _ = mine_store(mixed_store, "instance", cfg, index, fn_config)
    pd.testing.assert_frame_equal(got, want)
    assert chunked <= sum(judged)
    if kind == "ivf":  # the big source's anchors fetch past it: columns left unjudged
        assert chunked < sum(judged), (chunked, sum(judged))
