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
