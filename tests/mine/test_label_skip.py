"""The label relation's hard negatives: each anchor's search skips its class (all of it
positives) instead of fetching it and dropping it (hunt-r 2: k was the window plus the
median class size, and anchors of larger classes were searched again with 4x that: work
O(N x N / classes)). The table is the one an exact search of every other row gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pairkit.index.options import IndexOptions
from pairkit.mine import hard_negatives
from pairkit.mine.config import MineConfig
from pairkit.mine.false_negatives import FalseNegativeConfig

SIZES = (90, 40, 12, 5, 2)  # rows per class: imbalanced, one class of two


def labelled_store(path: Path, seed: int = 0):  # noqa: ANN201
    """A one-view store of classes of :data:`SIZES` rows, three unlabelled rows, and two
    exact copies (tied scores)."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(seed)
    labels: list[str | None] = [f"c{c}" for c, n in enumerate(SIZES) for _ in range(n)]
    labels += [None, None, None]
    centers = rng.normal(size=(len(SIZES) + 1, 16))
    code = [int(lab[1:]) if lab else len(SIZES) for lab in labels]
    x = centers[code] + 0.8 * rng.normal(size=(len(labels), 16))
    x[7] = x[100]  # the same vector in class 0 and class 1: ties across classes
    x[8] = x[100]
    paths = [f"img{i:04d}.jpg" for i in range(len(labels))]
    items = pd.DataFrame({"path": paths, "source": paths, "view": 0, "label": labels})
    return write_store(path, x.astype(np.float32), items, encoder={"name": "random"},
                       dtype="float32")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return labelled_store(tmp_path_factory.mktemp("label") / "s")


def brute_force(x: np.ndarray, labels: np.ndarray, anchor: int, k: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` (ids, scores) of ``anchor`` among the rows of other labels
    (unlabelled rows included), score descending, ties by ascending id (float64)."""
    s = x.astype(np.float64) @ x[anchor].astype(np.float64)
    other = np.flatnonzero(labels != labels[anchor])
    order = np.lexsort((other, -s[other]))[:k]
    return other[order], s[other][order]


def mine(store, cfg: MineConfig, fn_config: FalseNegativeConfig | None = None,  # noqa: ANN001
         index: IndexOptions | None = None):  # noqa: ANN201
    from pairkit.mine.command import mine_store

    return mine_store(store, "label", cfg, index or IndexOptions(kind="flat"), fn_config)


@pytest.fixture(params=["copy", "over-fetch"])
def part_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way :func:`pairkit.index.outside.search_outside_parts` searches a class: in a
    copy of the other rows, or in every row with k + the class's size."""
    from pairkit.index import outside

    big = request.param == "copy"
    monkeypatch.setattr(outside, "SMALL_PART_QUERIES", 0 if big else 10**9)
    monkeypatch.setattr(outside, "OVER_FETCH_ROWS", 0 if big else 10**9)
    return str(request.param)


@pytest.mark.parametrize("k", [5, 20])
def test_negatives_are_the_nearest_rows_of_other_labels(store, part_path, k) -> None:  # noqa: ANN001
    """Every anchor's K negatives are its K nearest rows of another label (brute force),
    in order, and no row of its class was fetched (none removed as ``positive``/``self``);
    the first search asks for the window's k, not for a class (failed before: k_initial
    was 88 at K = 5: the window twice, the anchor, 64 positives and the median class's
    12 rows, and the class's rows were fetched and removed as positives)."""
    x = store.vectors(np.float32)
    labels = store.items["label"].fillna("<none>").to_numpy(dtype=object)
    table, stats = mine(store, MineConfig(num_negatives=k))
    assert stats["removed"]["positive"] == 0 and stats["removed"]["self"] == 0
    assert stats["k_initial"] == 2 * k + 1 and stats["retries"] == 0
    got = table.sort_values(["anchor_id", "neg_rank"])
    for anchor, rows in got.groupby("anchor_id"):
        ids, scores = brute_force(x, labels, int(anchor), k)
        assert rows["negative_id"].tolist() == ids.tolist()
        np.testing.assert_allclose(rows["neg_score"], scores, atol=1e-6)
        assert rows["neg_rank"].tolist() == list(range(k))
    assert table["anchor_id"].nunique() == sum(n for n in SIZES if n > 1)


def test_torch_engine_skips_the_class_too(store) -> None:  # noqa: ANN001
    """The exact torch search masks the class's scores: the same negatives."""
    pytest.importorskip("torch")
    cfg = MineConfig(num_negatives=5)
    want, _ = mine(store, cfg)
    got, stats = mine(store, cfg, index=IndexOptions(kind="flat", backend="torch",
                                                     device="cpu"))
    assert stats["k_initial"] == 11 and stats["removed"]["positive"] == 0
    cols = ["anchor_id", "positive_id", "negative_id", "neg_rank"]
    pd.testing.assert_frame_equal(got[cols], want[cols])
    np.testing.assert_allclose(got["neg_score"], want["neg_score"], atol=1e-6)


CONFIGS = [
    (MineConfig(num_negatives=5), None),
    (MineConfig(num_negatives=20), None),
    (MineConfig(num_negatives=5, sampling="softmax", sampling_temperature=0.1), None),
    (MineConfig(num_negatives=5, sampling="random", range_min=3, range_max=30), None),
    (MineConfig(num_negatives=5, relative_margin=0.05, batch_size=16), None),
    (MineConfig(num_negatives=5), FalseNegativeConfig(rules=("near-duplicate", "margin"))),
    (MineConfig(num_negatives=20, fn_mode="keep"), FalseNegativeConfig()),
    (MineConfig(num_negatives=5), FalseNegativeConfig()),  # the label rule skips the class
]


@pytest.mark.parametrize(("cfg", "fn_config"), CONFIGS)
def test_the_table_is_the_one_of_fetching_the_class(store, part_path, cfg, fn_config,  # noqa: ANN001
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The table equals the one of the search that fetches the class and drops it (the
    code before: same rows, columns, ids, ranks and flags; scores to float rounding), for
    samplings, windows, margins, small blocks and false-negative rules."""
    got, stats = mine(store, cfg, fn_config)
    monkeypatch.setattr(hard_negatives, "skips_class", lambda *a: False)
    want, before = mine(store, cfg, fn_config)
    assert stats["k_initial"] < before["k_initial"]
    assert list(got.columns) == list(want.columns)
    scores = [c for c in got.columns if c.endswith("score")]
    pd.testing.assert_frame_equal(got.drop(columns=scores), want.drop(columns=scores))
    np.testing.assert_allclose(got[scores].to_numpy(float), want[scores].to_numpy(float),
                               atol=1e-6)


def test_search_outside_parts_equals_a_filtered_exact_search(part_path) -> None:  # noqa: ANN001
    """:meth:`Searcher.search_outside` against numpy: rows of the query's part skipped,
    unlabelled rows (-1) kept, ties by id, -inf / -1 where fewer rows are left."""
    from pairkit.index.open import open_searcher

    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[10] = x[11] = x[40]  # ties
    parts = np.repeat(np.arange(4), 15)
    parts[[0, 20]] = -1
    searcher = open_searcher(x, IndexOptions(kind="flat"))
    assert searcher.excludes
    q = np.r_[1:60:3]
    s, i = searcher.search_outside(x[q], 50, parts[q], parts)
    for r, a in enumerate(q):
        other = np.flatnonzero(parts != parts[a])
        sims = x[other].astype(np.float64) @ x[a]
        order = other[np.lexsort((other, -sims))]
        assert i[r, : len(order)].tolist() == order.tolist()
        assert (i[r, len(order):] == -1).all() and np.isneginf(s[r, len(order):]).all()


def test_torch_search_outside_many_parts_skips_without_fetching(monkeypatch) -> None:  # noqa: ANN001
    """The torch engine's :meth:`Searcher.search_outside` with as many parts as rows (the
    rules' lists outside each row's source) equals numpy's, and asks the search for k
    only: the query's part masked in the score blocks (failed before: past 2^27 one-hot
    codes it fetched k + the largest part and dropped it, 6.6 GB for the lists of 25,000
    rows with a 10,000-view source)."""
    pytest.importorskip("torch")
    from pairkit.index import outside
    from pairkit.index.open import open_searcher

    rng = np.random.default_rng(5)
    n = 13_000  # (parts + 2) x n above 2^27: the one-hot mask the search had used
    x = rng.normal(size=(n, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[10] = x[11]  # a tie
    parts = np.r_[np.zeros(1000, np.int64), np.arange(1, n - 999)]  # one big part, singles
    parts[[3, 7000]] = -1
    searcher = open_searcher(x, IndexOptions(kind="flat", backend="torch", device="cpu"))
    monkeypatch.setattr(outside, "over_fetched_outside", None)  # must not be called
    q = np.r_[0:n:211, 3, 7000]
    s, i = searcher.search_outside(x[q], 9, parts[q], parts)
    for r, a in enumerate(q):
        other = np.flatnonzero(parts != parts[a])
        sims = x[other].astype(np.float64) @ x[a]
        order = other[np.lexsort((other, -sims))][:9]
        assert i[r].tolist() == order.tolist()
        np.testing.assert_allclose(s[r], sims[np.argsort(-sims, kind="stable")][:9], atol=1e-6)


def test_approximate_indexes_and_other_relations_fetch_as_before(store) -> None:  # noqa: ANN001
    """IVF (approximate) can't skip rows exactly: the class is fetched and dropped as
    before; the instance relation never skips."""
    from pairkit.core.relations import build_relation
    from pairkit.index.open import excludes_exactly

    n = store.count
    assert excludes_exactly(IndexOptions(kind="auto"), n)
    assert not excludes_exactly(IndexOptions(kind="ivf"), n)
    assert not excludes_exactly(IndexOptions(kind="flat", float16=True), n)
    assert not excludes_exactly(IndexOptions(kind="auto", exact_max_rows=10), n)
    _, stats = mine(store, MineConfig(num_negatives=5), index=IndexOptions(kind="ivf",
                                                                            nlist=2))
    assert stats["removed"]["positive"] > 0

    class Exact:
        def skips_exactly(self, n_items: int) -> bool:
            return True

    rel = build_relation("instance", store.items)
    assert not hard_negatives.skips_class(MineConfig(), rel, Exact(), None, n)
    assert hard_negatives.skips_class(MineConfig(), build_relation("label", store.items),
                                      Exact(), None, n)
    assert not hard_negatives.skips_class(MineConfig(hard=False),
                                          build_relation("label", store.items), Exact(),
                                          None, n)


def test_only_a_fully_labelled_store_skips_by_label() -> None:
    """skippable_rows by hand: every row labelled (two labels) skips the anchor's label;
    a partially labelled store skips nothing, not even with the cluster rule's runs set
    (the unlabelled anchors' unlabelled candidates are not the label rule's to drop, and a
    labelled pair is the labels' to decide, not the clusters'), while the same runs on an
    unlabelled store skip by cluster; one label, or flags kept or attracted, skip
    nothing."""
    from pairkit.mine.fn_context import FnContext
    from pairkit.mine.skip import skippable_rows

    x = np.eye(8, dtype=np.float32)
    sources = np.arange(8, dtype=np.int64)
    assign = np.array([[0, 0, 1, 1, 2, 2, 3, 3]] * 2, dtype=np.int16)

    def ctx(labels: list) -> FnContext:  # noqa: ANN001
        return FnContext(vectors=x, labels=np.array(labels, dtype=object), sources=sources,
                         cluster_assign=assign.copy())

    fn = FalseNegativeConfig(rules=("label", "cluster"), cluster_diffusion=0.0)
    full = skippable_rows(ctx(list("aabbaabb")), fn, MineConfig())
    assert full is not None and full.what == "label" and full.votes == 1
    assert full.parts.tolist() == [[0, 0, 1, 1, 0, 0, 1, 1]]
    assert skippable_rows(ctx(["a", "a", "b", "b", None, None, "b", "b"]), fn,
                          MineConfig()) is None
    assert skippable_rows(ctx(list("aaaaaaaa")), fn, MineConfig()) is None
    unlabelled = FnContext(vectors=x, labels=None, sources=sources, cluster_assign=assign)
    by_cluster = skippable_rows(unlabelled, fn, MineConfig())
    assert by_cluster is not None and by_cluster.what == "cluster"
    assert skippable_rows(ctx(list("aabbaabb")), fn, MineConfig(fn_mode="keep")) is None
    assert skippable_rows(ctx(list("aabbaabb")), fn, MineConfig(fn_mode="attract")) is None
