"""``mine``'s table does not depend on ``--batch-size`` (nor on the search engine): the
negatives' scores are the pairs' own dot products, accumulated in float64 in a fixed order
and rounded once to float32 (:func:`pairkit.index.search.pair_scores`), not the search's
block-shaped matrix products (FAISS scores a block of fewer than 20 queries pair by pair
and a larger one by BLAS, whose rounding depends on the block's shape), and the negatives
are ordered and chosen by them, ties by id."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pairkit.core.store_writer import write_store
from pairkit.core.tables import read_table
from pairkit.index.options import IndexOptions
from pairkit.index.search import pair_scores, rounded_sum, row_norms
from pairkit.mine.command import mine_to_files
from pairkit.mine.config import MineConfig

# FAISS pair by pair (< 20 queries), BLAS blocks of 64, one block of every row: measured on
# 1,600 rows x 96 dims (OpenBLAS, one thread), the last one rounds 3 in 4 scores otherwise
SIZES = (7, 64, 5000)


def make_store(path, dtype: str, n_sources: int = 800, dim: int = 96):
    """Clustered rows (many close scores), two views per source, labels by class."""
    rng = np.random.default_rng(11)
    centers = rng.normal(size=(6, dim))
    base = centers[np.arange(n_sources) % 6] + 0.7 * rng.normal(size=(n_sources, dim))
    x = np.repeat(base, 2, axis=0) + 0.2 * rng.normal(size=(2 * n_sources, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sources = np.repeat(np.arange(n_sources), 2)
    items = pd.DataFrame({"path": [f"c{s % 6}/s{s}.jpg" for s in sources],
                          "view": np.tile([0, 1], n_sources),
                          "label": [f"c{s % 6}" for s in sources]})
    items["source"] = items["path"]
    return write_store(path, x.astype(np.float32), items, dtype=dtype, shard_rows=700)


@pytest.fixture(scope="module", params=["float16", "float32"])
def store(request, tmp_path_factory):
    return make_store(tmp_path_factory.mktemp(request.param) / "st", request.param)


def mined(store, tmp_path, batch_size: int, backend: str = "faiss", **options
          ) -> pd.DataFrame:
    out = tmp_path / f"t{batch_size}{backend}.parquet"
    cfg = MineConfig(num_negatives=5, hard=True, batch_size=batch_size, **options)
    mine_to_files(store.root, str(out), cfg,
                  index=IndexOptions(kind="flat", device="cpu", backend=backend))
    return read_table(out)


@pytest.fixture(scope="module")
def tables(store, tmp_path_factory):
    """The store's table at each of :data:`SIZES`."""
    folder = tmp_path_factory.mktemp("tables")
    return {size: mined(store, folder, size) for size in SIZES}


def test_same_table_at_every_batch_size(tables):
    for size in SIZES[1:]:
        pd.testing.assert_frame_equal(tables[size], tables[SIZES[0]], check_exact=True)


def test_same_table_under_a_score_threshold(store, tables, tmp_path):
    """``--max-score`` compares the written scores: it flips with no batch size."""
    cut = float(np.median(tables[64]["neg_score"]))
    pd.testing.assert_frame_equal(mined(store, tmp_path, SIZES[0], max_score=cut),
                                  mined(store, tmp_path, SIZES[-1], max_score=cut),
                                  check_exact=True)


def test_same_table_with_the_torch_engine(store, tables, tmp_path):
    pytest.importorskip("torch")
    pd.testing.assert_frame_equal(mined(store, tmp_path, 64, backend="torch"), tables[64],
                                  check_exact=True)


def test_neg_score_is_the_float64_dot_product_rounded(store, tables):
    table = tables[64]
    rows = store.vectors().astype(np.float64)
    a, n = table["anchor_id"].to_numpy(), table["negative_id"].to_numpy()
    assert len(a) > 1000
    # exactly rounded sums (math.fsum), clipped to [-1, 1] as the table writes cosines
    want = np.clip(np.array([math.fsum(rows[i] * rows[j]) for i, j in zip(a, n, strict=True)],
                            dtype=np.float32), -1, 1)
    np.testing.assert_array_equal(table["neg_score"].to_numpy(np.float32), want)


class OnDemand:
    """Rows gathered on demand, not an array (as :class:`ShardRows`)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x, self.shape = x, x.shape

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, ids) -> np.ndarray:
        return self.x[ids].copy()


def test_pair_scores_by_hand():
    v = np.array([[0.5, 0.25, 0.125], [1.0, -1.0, 2.0], [3.0, 0.0, 1e-8]], np.float32)
    got = pair_scores(v, np.array([0, 1]), np.array([[1, 2, -1], [0, 2, 1]]))
    want = np.array([[0.5 - 0.25 + 0.25, 1.5 + np.float64(np.float32(1e-8)) * 0.125, -np.inf],
                     [0.5, 3.0 + 2 * np.float64(np.float32(1e-8)), 6.0]])
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert got.dtype == np.float32
    # the same bits for a row alone and in any block of rows, from rows read on demand too
    one = pair_scores(v, np.array([1]), np.array([[0, 2, 1]]))
    np.testing.assert_array_equal(one[0], got[1])
    np.testing.assert_array_equal(
        pair_scores(OnDemand(v), np.array([0, 1]), np.array([[1, 2, -1], [0, 2, 1]])), got)


def test_pair_scores_any_chunk_any_source():
    rng = np.random.default_rng(3)
    v = rng.normal(size=(300, 40)).astype(np.float16).astype(np.float32)
    rows, ids = rng.integers(0, 300, 50), rng.integers(-1, 300, (50, 9))
    want = pair_scores(v, rows, ids)
    for chunk in (1, 700, 1 << 20):
        for src in (v, OnDemand(v)):
            np.testing.assert_array_equal(pair_scores(src, rows, ids, row_norms(v), chunk), want)
    ref = [[rounded_sum(v[r].astype(np.float64) * v[j]) if j >= 0 else -np.inf for j in row]
           for r, row in zip(rows, ids, strict=True)]
    np.testing.assert_array_equal(want, np.array(ref, np.float32))


def test_pair_scores_near_a_rounding_point():
    """1 + 2**-24 + 2**-60 is just above the midpoint of float32's 1 and 1 + 2**-23: float64
    rounds it onto the midpoint (and float32 then to 1, the even one); the exact sum rounds
    up. The same with and without the rows' norms given."""
    v = np.array([[1.0, 1.0, 1.0], [1.0, 2.0**-24, 2.0**-60], [1.0, 2.0**-24, -(2.0**-60)],
                  [1.0, 2.0**-24, 0.0]], np.float32)
    want = np.float32([1 + 2.0**-23, 1.0, 1.0])  # above, below and on the midpoint (even)
    rows, ids = np.array([0]), np.array([[1, 2, 3]])
    for norms in (None, row_norms(v)):
        np.testing.assert_array_equal(pair_scores(v, rows, ids, norms)[0], want)
        # rows read on demand (a store's shards) go another way: the same
        np.testing.assert_array_equal(pair_scores(OnDemand(v), rows, ids, norms)[0], want)
    assert rounded_sum(np.array([1.0, 2.0**-24, 2.0**-60])) == np.float32(1 + 2.0**-23)
    assert rounded_sum(np.array([0.25, 0.5])) == np.float32(0.75)


def test_pair_scores_rows_on_demand_chunk_by_chunk(monkeypatch):
    """Rows read on demand whose distinct rows don't fit the compact copy: the same."""
    from pairkit.index import search

    rng = np.random.default_rng(4)
    v = rng.normal(size=(200, 24)).astype(np.float32)
    rows, ids = rng.integers(0, 200, 30), rng.integers(-1, 200, (30, 7))
    want = pair_scores(v, rows, ids)
    monkeypatch.setattr(search, "PAIR_COMPACT_BYTES", 0)
    for chunk in (1, 500, 1 << 20):
        np.testing.assert_array_equal(pair_scores(OnDemand(v), rows, ids, None, chunk), want)


def tied_store(path, dtype: str = "float32", eps: float = 0.0, tie: int = 500,
               near: int = 300, other: int = 400, dim: int = 32):
    """``tie`` identical rows (one vector ``v``, each its own source; ``eps``: each moved
    that far at random, near-identical), ``near`` sources of two views close to ``v``
    (their nearest rows are all the tie's: an exact tie of 500 scores at the end of every
    k they fetch) and ``other`` sources of two views at random."""
    rng = np.random.default_rng(5)
    v = rng.normal(size=dim)
    v /= np.linalg.norm(v)
    near_base = v + 0.3 * rng.normal(size=(near, dim)) / np.sqrt(dim)
    other_base = rng.normal(size=(other, dim))
    x = np.concatenate([np.repeat(v[None], tie, axis=0), np.repeat(near_base, 2, axis=0),
                        np.repeat(other_base, 2, axis=0)])
    x[:tie] += eps * rng.normal(size=(tie, dim))
    x[tie:] += 0.05 * rng.normal(size=(len(x) - tie, dim)) / np.sqrt(dim)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sources = [f"t{i}" for i in range(tie)] + [f"s{s}" for s in range(near + other)
                                                for _ in range(2)]
    views = [0] * tie + [0, 1] * (near + other)
    items = pd.DataFrame({"path": [f"{s}#{v_}" for s, v_ in zip(sources, views, strict=True)],
                          "source": sources, "view": views})
    return write_store(path, x.astype(np.float32), items, dtype=dtype, shard_rows=700)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_an_exact_tie_past_the_fetched_rows_is_not_searched_through(tmp_path, dtype,
                                                                    monkeypatch):
    """500 identical rows nearest to 600 anchors (k = 5): the fetched candidates end in an
    exact tie whose scores the search cannot place against the rows it left out. The tie's
    rows are taken (ties by id), not searched again 4x deeper until the whole tie is
    fetched (failed before: 3 retries per block, k up to 1,216 for every anchor near the
    tie), and the table is the same at every batch size."""
    from pairkit.mine import blocks
    from pairkit.mine.command import mine_store

    store = tied_store(tmp_path / "st", dtype)
    asked: list[int] = []
    search = blocks.search_candidates

    def counted(st, rows, k):
        asked.append(k)
        return search(st, rows, k)

    monkeypatch.setattr(blocks, "search_candidates", counted)
    got = {}
    for size in (7, 64, 5000):
        asked.clear()
        got[size], stats = mine_store(store, "instance", MineConfig(num_negatives=5,
                                                                    batch_size=size),
                                      IndexOptions(kind="flat"))
        assert stats["retries"] == 0 and stats["k_max"] == stats["k_initial"], stats
        assert max(asked) == stats["k_initial"], (max(asked), stats)
    table = got[64]
    near = table[table["anchor_id"].between(500, 1099)]
    tie = near[near["negative_id"] < 500].groupby("anchor_id")["negative_id"]
    # most anchors near the tie take rows of it, its lowest ids (ties by id), best first
    assert tie.ngroups > 300 and (tie.size() == 5).sum() > 100
    assert tie.apply(lambda ids: list(ids) == list(range(len(ids)))).all()
    for size in (7, 5000):
        pd.testing.assert_frame_equal(got[size], got[64], check_exact=True)


def test_tied_by_hand():
    """The highest exact score shared by two or more untrusted candidates, +inf without."""
    from pairkit.mine.blocks import tied

    inf = np.inf
    got = tied(np.array([[0.5, 0.5, 0.4, -inf], [0.3, 0.2, 0.1, -inf],
                         [0.6, 0.7, 0.6, 0.6], [-inf, -inf, -inf, -inf],
                         [0.1, 0.2, 0.1, 0.2]], dtype=np.float32))
    np.testing.assert_array_equal(got, np.array([0.5, inf, 0.6, inf, 0.2], np.float32))
    assert tied(np.zeros((3, 1), np.float32)).tolist() == [inf] * 3


def test_rescored_takes_a_tie_at_the_end_by_hand():
    """Rows 1-4 one vector (an exact tie, 0.6 with the anchor, row 0), row 5 a little
    closer (0.6 + 2e-5, within the 1e-4 of the search's last score): the search fetched
    rows 5, 4, 2 (its last score 0.6). Not trusted alone; with the tie all are kept: row
    5, then the tie's rows by id; only one row of the tie fetched: all dropped."""
    from pairkit.mine.blocks import rescored

    x = np.zeros((6, 2))
    x[0] = [1, 0]
    x[1:5] = [0.6, 0.8]
    c = 0.6 + 2e-5
    x[5] = [c, np.sqrt(1 - c * c)]
    s = np.array([[c, 0.6, 0.6], [c, 0.6, -np.inf]], np.float32)
    i = np.array([[5, 4, 2], [5, 4, -1]])
    e, ids, exh = rescored(x, None, np.array([0, 0]), s, i, False, None)
    assert ids.tolist() == [[5, 2, 4], [5, 4, -1]] and exh.tolist() == [False, True]
    np.testing.assert_array_equal(e[0], np.array([c, 0.6, 0.6], np.float32))
    e, ids, _ = rescored(x, None, np.array([0]), s[:1, :2], i[:1, :2], False, None)
    assert ids.tolist() == [[-1, -1]]


def test_a_band_of_near_identical_rows_is_searched_through_once(tmp_path, monkeypatch):
    """The 500 rows moved by 1e-6 each (re-encoded copies, say): no exact tie, but every
    score within 1e-4 of the search's last one. The anchors near them are searched again
    once, 4x deeper, and take what that fetched (failed before: 3 retries per block, k up
    to 896, 138 anchors), and the table is the same at every batch size."""
    from pairkit.mine import blocks
    from pairkit.mine.command import mine_store

    store = tied_store(tmp_path / "st", "float32", eps=1e-6)
    asked: list[int] = []
    search = blocks.search_candidates
    monkeypatch.setattr(blocks, "search_candidates",
                        lambda st, rows, k: asked.append(k) or search(st, rows, k))
    got = {}
    for size in (7, 64, 5000):
        got[size], stats = mine_store(store, "instance", MineConfig(num_negatives=5,
                                                                    batch_size=size),
                                      IndexOptions(kind="flat"))
        assert stats["anchors_retried"] > 100, stats
        assert stats["k_max"] == max(asked) == 4 * stats["k_initial"], (max(asked), stats)
    for size in (7, 5000):
        pd.testing.assert_frame_equal(got[size], got[64], check_exact=True)
