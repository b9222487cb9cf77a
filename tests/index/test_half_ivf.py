"""Indices built from a store's rows read in place (pairkit/core/shard_rows.py,
pairkit/index/half_ivf.py): the same index and the same search results as from the
store's float32 copy in memory, block by block across shards."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.core.shard_rows import ShardRows
from pairkit.core.store_writer import write_store
from pairkit.index import faiss_build, half_ivf
from pairkit.index.half_ivf import HalfIvf
from pairkit.index.open import open_searcher
from pairkit.index.options import IndexOptions
from pairkit.index.search import IvfListMajor, exact_scores


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """3,000 clustered float16 rows in 7 shards (the last one short)."""
    rng = np.random.default_rng(3)
    centers = rng.normal(size=(6, 24))
    x = centers[rng.integers(0, 6, 3000)] + 0.4 * rng.normal(size=(3000, 24))
    items = pd.DataFrame({"path": [f"i{i}.jpg" for i in range(3000)]})
    return write_store(tmp_path_factory.mktemp("half") / "st", x.astype(np.float32), items,
                       dtype="float16", shard_rows=450)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 256 rows (so a block spans two shards) instead of 65,536."""
    monkeypatch.setattr(faiss_build, "ADD_BLOCK_ROWS", 256)
    monkeypatch.setattr(half_ivf, "ASSIGN_BLOCK_ROWS", 256)


def test_shard_rows_read_what_the_float32_copy_holds(store):
    rows, x = store.rows(), store.vectors(np.float32)
    assert len(store.shard_arrays()) == 7 and rows.shape == x.shape and rows.dtype == np.float16
    ids = np.array([0, 449, 450, 2999, 5, 5, 1800, -1])
    np.testing.assert_array_equal(rows[ids].astype(np.float32), x[ids])
    np.testing.assert_array_equal(rows[440:1400:3].astype(np.float32), x[440:1400:3])
    np.testing.assert_array_equal(rows[7].astype(np.float32), x[7])
    assert rows[np.zeros(0, np.int64)].shape == (0, 24)
    starts = [s for s, _ in rows.blocks(1000)]
    assert starts == [0, 1000, 2000]
    with pytest.raises(IndexError):
        rows[np.array([3000])]
    with pytest.raises(IndexError):
        rows[np.array([0.5])]


def test_shard_rows_hand_back_mapped_pages(store):
    """Rows read through ShardRows leave none of the shards' mapped pages in this
    process's resident set (/proc/self/smaps); read straight from the mapping they do."""
    rows = store.rows()
    assert all(m is not None for m in rows.maps)  # every shard is a file mapping
    rows.release()
    assert mapped_rss_kb(rows) == 0
    float(np.asarray(rows.arrays[0], np.float32).sum())  # the plain mapping: pages stay
    assert mapped_rss_kb(rows) > 0
    rows[np.arange(3000)]
    rows[100:2900]
    assert mapped_rss_kb(rows) == 0


def mapped_rss_kb(rows: ShardRows) -> int:
    """The resident kB of ``rows``' shard mappings in this process (/proc/self/smaps)."""
    spans = []
    for m in rows.maps:
        arr = np.frombuffer(m, np.uint8)
        spans.append((arr.ctypes.data, arr.ctypes.data + len(arr)))
    total, current = 0, None
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                current = any(lo < b and a < hi for a, b in spans)
            elif head == "Rss:" and current:
                total += int(line.split()[1])
    return total


@pytest.mark.parametrize("case", ["ivf", "ivf-short-lists", "flat", "ivf-float16", "flat-float16",
                                  "ivfpq"])
def test_index_from_shard_rows_searches_as_from_memory(store, small_blocks, case):
    opts = {"ivf": IndexOptions(kind="ivf", nlist=8, nprobe=3),
            "ivf-short-lists": IndexOptions(kind="ivf", nlist=40, nprobe=5),
            "flat": IndexOptions(kind="flat"),
            "ivf-float16": IndexOptions(kind="ivf", nlist=8, nprobe=3, float16=True),
            "flat-float16": IndexOptions(kind="flat", float16=True),
            "ivfpq": IndexOptions(kind="ivfpq", nlist=8, nprobe=3)}[case]
    opts = opts.__class__(**{**opts.__dict__, "device": "cpu", "backend": "faiss"})
    x = store.vectors(np.float32)
    mem = open_searcher(x, opts)
    streamed = open_searcher(store.rows(), opts)
    if case == "ivf":  # 3,000 rows >= 256 x 8 cells: float16 lists, list-major search
        assert isinstance(streamed.index, HalfIvf) and IvfListMajor.worthwhile(mem.index)
        assert streamed.index.codes.dtype == np.float16
        lists = IvfListMajor(mem.index)
        for cell in range(8):
            v16, i16 = streamed.index.inverted_list(cell)
            v32, i32 = lists.inverted_list(cell)
            np.testing.assert_array_equal(i16, i32)
            np.testing.assert_array_equal(v16, v32)
    else:
        assert not isinstance(streamed.index, HalfIvf)
    q = x[::7]
    for k in (1, 10, 60):
        s1, i1 = mem.search(q, k)
        s2, i2 = streamed.search(q, k)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(s1, s2)


def test_exact_scores_against_shard_rows_equal_the_array(store):
    x = store.vectors(np.float32)
    rng = np.random.default_rng(0)
    ids = rng.integers(-1, 3000, size=(50, 9))
    q = x[:50]
    np.testing.assert_array_equal(exact_scores(q, store.rows(), ids, batch_size=16),
                                  exact_scores(q, x, ids))


def test_hnsw_needs_the_rows_in_memory(store):
    from pairkit.errors import PairkitError

    with pytest.raises(PairkitError, match="in memory"):
        faiss_build.build_index(store.rows(), IndexOptions(kind="hnsw").resolved(3000, 24))


def test_scattered_rows_map_one_shard_at_a_time(store, monkeypatch):
    """A sample across every shard (the IVF training rows): at most one shard's pages are
    mapped at any time, each handed back before the next shard is read."""
    rows = store.rows()
    rows.release()
    seen = []
    real = rows.release

    def spy(shards=None):
        seen.append(mapped_rss_kb(rows))
        real(shards)

    monkeypatch.setattr(rows, "release", spy)
    rows[np.arange(0, 3000, 7)]
    shard_kb = 450 * 24 * 2 / 1024
    assert len(seen) == 7 and max(seen) <= shard_kb + 8, seen  # one shard (+ a page)
    assert mapped_rss_kb(rows) == 0


def test_half_ivf_takes_many_queries_per_pass(store, small_blocks, monkeypatch):
    """knn_search hands a HalfIvf up to ``query_batch`` queries per call (each call converts
    every cell it scans once, so bigger calls convert less per query), not its
    ``batch_size``; the neighbours are those of searching in small batches."""
    from pairkit.index.search import knn_search

    opts = IndexOptions(kind="ivf", nlist=8, nprobe=3, device="cpu", backend="faiss")
    index = open_searcher(store.rows(), opts).index
    assert isinstance(index, HalfIvf)
    assert index.query_batch == half_ivf.PROBES_PER_SEARCH // 3
    monkeypatch.setattr(half_ivf, "PROBES_PER_SEARCH", 3 * 2000)
    assert index.query_batch == 8192  # never fewer than knn_search's default batch
    monkeypatch.setattr(half_ivf, "PROBES_PER_SEARCH", 3 * 20_000)
    calls: list[int] = []
    search = HalfIvf.search
    monkeypatch.setattr(HalfIvf, "search", lambda self, x, k: calls.append(len(x))
                        or search(self, x, k))
    q = np.tile(store.vectors(np.float32), (4, 1))  # 12,000 queries
    s1, i1 = knn_search(q, index, 10, batch_size=1000)
    assert calls == [12_000]
    small = [knn_search(q[a:a + 1000], index, 10) for a in range(0, 12_000, 1000)]
    s2, i2 = np.concatenate([s for s, _ in small]), np.concatenate([i for _, i in small])
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, rtol=0, atol=1e-6)  # BLAS blocking: last-bit rounding


@pytest.mark.parametrize("votes", [1, 2])
def test_masked_search_over_the_float16_lists_equals_the_float32_index(store, small_blocks,
                                                                       votes):
    # the cluster rule's search skipping the anchor's clusters, its IVF index built from
    # the rows in place (float16 lists): the same results as over a float32 IndexIVFFlat
    from pairkit.index.backend import CPU
    from pairkit.index.outside import outside_searcher

    x = store.vectors(np.float32)
    rng = np.random.default_rng(5)
    assign = rng.integers(0, 4, size=(3, len(x)))
    options = IndexOptions(kind="ivf", nlist=8, nprobe=3, seed=0)
    half, text_half = outside_searcher(x, assign, options, CPU, votes=votes,
                                       rows=store.rows())
    full, text_full = outside_searcher(x, assign, options, CPU, votes=votes)
    assert isinstance(half.inner.lists, HalfIvf)
    assert not isinstance(full.inner.lists, HalfIvf)
    anchors = np.arange(0, len(x), 5)
    s_half, i_half = half(anchors, 7)
    s_full, i_full = full(anchors, 7)
    np.testing.assert_array_equal(i_half, i_full)
    np.testing.assert_array_equal(s_half, s_full)
    assert (i_half >= 0).all() and text_half.endswith(text_full.split(";", 1)[1])
    # each cell's ids without its rows, as the rows' lists hold them
    for lists in (half.inner.lists, full.inner.lists):
        for cell in range(8):
            np.testing.assert_array_equal(lists.cell_ids(cell), lists.inverted_list(cell)[1])
    np.testing.assert_array_equal(half.inner.dominant, full.inner.dominant)


def test_lists_of_rows_computed_when_read_keep_ids_and_search_the_same(monkeypatch):
    # rows computed when read with ``recompute`` set (the rules' whitened rows): the lists
    # hold only the ids in cell order and compute a cell's rows again when it is scanned;
    # the same results as the lists holding the rows themselves
    from pairkit.core.row_view import RowView

    rng = np.random.default_rng(11)
    x = rng.normal(size=(3000, 16)).astype(np.float32)

    def unit(rows):
        rows = np.array(rows, dtype=np.float32) * 2.0 - 0.1
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    view = RowView(x, fn=unit, dim=16)
    spec = IndexOptions(kind="ivf", nlist=8, nprobe=3, seed=0).resolved(len(x), 16)
    kept = faiss_build.build_index(view, spec)
    view.recompute = True
    lazy = faiss_build.build_index(view, spec)
    assert isinstance(kept.codes, np.ndarray) and isinstance(lazy.codes, half_ivf.CellRows)
    np.testing.assert_array_equal(lazy.ids, kept.ids)
    np.testing.assert_array_equal(lazy.offsets, kept.offsets)

    def unread(*_args):
        raise AssertionError("a cell's ids read its rows")

    with monkeypatch.context() as patch:
        patch.setattr(half_ivf.CellRows, "__getitem__", unread)
        for cell in range(8):  # the ids only: no row computed
            np.testing.assert_array_equal(lazy.cell_ids(cell), kept.inverted_list(cell)[1])
    q = unit(x[:500])
    d1, i1 = kept.search(q, 7)
    d2, i2 = lazy.search(q, 7)
    np.testing.assert_array_equal(i2, i1)
    np.testing.assert_array_equal(d2, d1)
