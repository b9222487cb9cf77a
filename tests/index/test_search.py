"""knn_search against a brute-force numpy reference (the one search every command uses)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pairkit.index import search as search_mod
from pairkit.index.search import exact_scores, flat_index, knn_search, sort_results
from tests.conftest import random_store


def brute_force(queries: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference: all scores, stable sort by score descending (ties: lower id first)."""
    s = queries.astype(np.float64) @ base.astype(np.float64).T
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    scores = np.take_along_axis(s, order, 1).astype(np.float32)
    pad = k - order.shape[1]
    if pad > 0:
        order = np.pad(order, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return scores, order.astype(np.int64)


def _unit(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 7, 300, 305])
def test_matches_brute_force(k: int) -> None:
    base = _unit(300, 16)
    queries = _unit(50, 16, seed=1)
    scores, ids = knn_search(queries, base, k, batch_size=13)
    ref_s, ref_i = brute_force(queries, base, k)
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)
    if k > 300:  # more than the index holds: padded
        assert (ids[:, 300:] == -1).all() and np.isneginf(scores[:, 300:]).all()


def test_ties_ordered_by_id_like_a_stable_sort() -> None:
    rng = np.random.default_rng(3)
    base = rng.integers(-1, 2, size=(200, 4)).astype(np.float32)  # many exact ties
    queries = rng.integers(-1, 2, size=(40, 4)).astype(np.float32)
    for k in (1, 5, 37):
        scores, ids = knn_search(queries, base, k, batch_size=16 if k < 30 else 64)
        ref_s, ref_i = brute_force(queries, base, k)
        np.testing.assert_array_equal(ids, ref_i)
        np.testing.assert_array_equal(scores, ref_s)


def test_sorting_a_few_rows_at_a_time_gives_the_whole_sort(monkeypatch) -> None:
    """hunt-r 7: FAISS's answer is sorted in place some rows at a time (ROW_CHUNK_BYTES):
    one row at a time gives the brute-force order, ties by id, as one sort did."""
    rng = np.random.default_rng(3)
    base = rng.integers(-1, 2, size=(200, 4)).astype(np.float32)  # many exact ties
    queries = rng.integers(-1, 2, size=(40, 4)).astype(np.float32)
    whole = knn_search(queries, flat_index(base), 37, batch_size=64)
    monkeypatch.setattr(search_mod, "ROW_CHUNK_BYTES", 1)
    assert list(search_mod.row_chunks(3, 10)) == [slice(0, 1), slice(1, 2), slice(2, 3)]
    rows = knn_search(queries, flat_index(base), 37, batch_size=64)
    ref_s, ref_i = brute_force(queries, base, 37)
    for got in (whole, rows):
        np.testing.assert_array_equal(got[1], ref_i)
        np.testing.assert_array_equal(got[0], ref_s)


def test_float16_store_matches_brute_force(tmp_path: Path) -> None:
    store = random_store(tmp_path / "s", n_sources=60, views=2, dim=16, dtype="float16")
    x = store.vectors(np.float32)
    assert store.dtype == "float16"
    scores, ids = knn_search(x, x, 11)
    ref_s, ref_i = brute_force(x, x, 11)
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)
    # compare ids where neighbouring scores are not (near-)ties
    gap = np.abs(np.diff(ref_s.astype(np.float64), axis=1)) > 1e-5
    ok = np.ones_like(ids, dtype=bool)
    ok[:, 1:] &= gap
    ok[:, :-1] &= gap
    np.testing.assert_array_equal(ids[ok], ref_i[ok])


def test_batch_size_does_not_change_results() -> None:
    base = _unit(400, 8)
    a = knn_search(base, base, 9, batch_size=1)
    b = knn_search(base, base, 9, batch_size=4096)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])


def test_empty_queries_and_k_zero() -> None:
    base = _unit(10, 4)
    s, i = knn_search(base[:0], base, 3)
    assert s.shape == (0, 3) and i.shape == (0, 3)
    s, i = knn_search(base, base, 0)
    assert s.shape == (10, 0)


class GpuFakeIndex:
    """Stands in for a FAISS GPU index: refuses k > 2048 like the real one."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.ntotal = inner.ntotal  # type: ignore[attr-defined]

    def search(self, x: np.ndarray, k: int):  # noqa: ANN201
        if k > search_mod.GPU_MAX_K:
            raise AssertionError("k > 2048 reached the GPU index")
        return self.inner.search(x, k)  # type: ignore[attr-defined]


def test_gpu_k_limit_falls_back_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _unit(2200, 4)
    queries = base[:5]
    cpu = flat_index(base)
    gpu = GpuFakeIndex(cpu)
    assert search_mod.is_gpu_index(gpu)
    ref_s, ref_i = brute_force(queries, base, 2100)
    # explicit CPU twin
    s, i = knn_search(queries, gpu, 2100, cpu_fallback=cpu)
    np.testing.assert_array_equal(i[:, :50], ref_i[:, :50])
    # no twin: a CPU copy of the GPU index is made
    monkeypatch.setattr(search_mod, "cpu_copy", lambda index: index.inner)
    s2, i2 = knn_search(queries, gpu, 2100)
    np.testing.assert_array_equal(i2, i)
    # within the limit the GPU index itself answers
    s3, i3 = knn_search(queries, gpu, 2048)
    np.testing.assert_array_equal(i3[:, :50], ref_i[:, :50])


def test_exact_scores_and_sort_results() -> None:
    base = _unit(30, 8)
    q = _unit(4, 8, seed=5)
    ids = np.array([[3, -1, 7], [0, 1, 2], [29, 29, -1], [5, 6, 7]])
    got = exact_scores(q, base, ids, batch_size=3)
    for r in range(4):
        for c in range(3):
            if ids[r, c] < 0:
                assert np.isneginf(got[r, c])
            else:
                assert got[r, c] == pytest.approx(float(q[r] @ base[ids[r, c]]), abs=1e-6)
    s, i = sort_results(np.array([[0.5, 0.9, 0.5, -np.inf]], np.float32),
                        np.array([[4, 2, 1, -1]]))
    assert i.tolist() == [[2, 1, 4, -1]]


def test_row_dots_in_place_runs_and_gathers_give_the_same_products() -> None:
    """Evenly spaced rows (a run of consecutive rows, every other row) are read in place,
    other rows gathered: each product is the one einsum gives for that pair alone, in
    float32 and float64, from float16 too, and chunk 1 (every row gathered) gives the
    same bits as the views."""
    from pairkit.index.search import row_dots

    rng = np.random.default_rng(5)
    x = rng.normal(size=(5000, 24)).astype(np.float32)
    a = np.concatenate([np.arange(3000), rng.integers(0, 5000, 2000), np.arange(10, 20),
                        np.arange(0, 5000, 2), np.arange(7, 5000, 3), [4999, 4999]])
    b = np.concatenate([rng.integers(0, 5000, 5010), np.arange(1, 5000, 2),
                        np.arange(4, 4997, 3), [4998, 4999]])
    assert len(a) == len(b)
    for vectors in (x, x.astype(np.float16)):
        for dtype in (np.float32, np.float64):
            want = np.array([np.einsum("d,d->", np.asarray(vectors[i], dtype),
                                       np.asarray(vectors[j], dtype))
                             for i, j in zip(a, b, strict=True)])
            for chunk in (1, 7, 2048, 100_000):
                got = row_dots(vectors, a, b, dtype=dtype, chunk=chunk)
                assert got.dtype == dtype
                np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32
                                           else 1e-12)
                np.testing.assert_array_equal(got, row_dots(vectors, a, b, dtype=dtype))
    for bad in ([4998, 4999, 5000], [-5003, -5002, -5001]):  # refused as by a gather
        with pytest.raises(IndexError):
            row_dots(x, np.array([0, 1, 2]), np.array(bad))


def test_exact_scores_in_place_equals_the_gathered_products() -> None:
    """The in-place path (FAISS by id, float32 contiguous base, also a memory map) gives the
    gathered einsum's products; other bases go through the gather; bad ids are refused."""
    from pairkit.index.search import gathered_scores

    base = _unit(500, 48, seed=2)
    q = _unit(70, 48, seed=3)
    ids = np.random.default_rng(4).integers(-1, 500, (70, 9))
    ref = q.astype(np.float64) @ base.astype(np.float64).T
    want = np.where(ids < 0, -np.inf, np.take_along_axis(ref, np.maximum(ids, 0), 1))
    for got in (exact_scores(q, base, ids, batch_size=16), gathered_scores(q, base, ids, 16)):
        assert (np.isneginf(got) == (ids < 0)).all()
        np.testing.assert_allclose(got, want, atol=1e-6)
    # a non-contiguous or float16 base takes the gather
    wide = np.repeat(base, 2, axis=1)[:, ::2]
    np.testing.assert_allclose(exact_scores(q, wide, ids), want, atol=1e-6)
    half = base.astype(np.float16)
    np.testing.assert_allclose(exact_scores(q, half, ids), gathered_scores(q, half, ids),
                               atol=1e-6)
    with pytest.raises(IndexError):
        exact_scores(q, base, np.full((70, 2), 500))
    assert np.isneginf(exact_scores(q[:2], base[:0], np.full((2, 3), -1))).all()
    assert exact_scores(q, base, np.zeros((70, 0), np.int64)).shape == (70, 0)


def test_exact_scores_on_a_memory_map(tmp_path) -> None:
    base = _unit(200, 16, seed=6)
    np.save(tmp_path / "v.npy", base)
    mm = np.load(tmp_path / "v.npy", mmap_mode="r")
    q = _unit(10, 16, seed=7)
    ids = np.random.default_rng(8).integers(0, 200, (10, 5))
    np.testing.assert_allclose(exact_scores(q, mm, ids), exact_scores(q, base, ids), atol=1e-7)


def test_knn_search_of_an_array_equals_the_flat_index() -> None:
    """An array is searched in place (faiss.knn, no index copy): the same scores and ids
    as its IndexFlatIP, ties settled by id, short bases padded."""
    base = _unit(40, 6, seed=9)
    base[10] = base[3]  # exact ties
    base[25] = base[3]
    queries = np.concatenate([_unit(15, 6, seed=10), base[[3, 10]]])
    for k in (1, 3, 40, 45):
        s, i = knn_search(queries, base, k, batch_size=4)
        s2, i2 = knn_search(queries, flat_index(base), k, batch_size=4)
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_array_equal(s, s2)
    s, i = knn_search(base[[3]], base, 3)
    assert i[0].tolist() == [3, 10, 25]
    s, i = knn_search(queries, base, 45)
    assert (i[:, 40:] == -1).all() and np.isneginf(s[:, 40:]).all()


def test_ivf_list_major_reads_the_lists_in_place_and_searches_as_faiss() -> None:
    """IvfListMajor's lists are read-only views of the index's own memory (no copy of the
    index), hold exactly the rows faiss put in each list, and the list-major search gives
    faiss's own results."""
    import faiss

    from pairkit.index.search import IvfListMajor

    x = np.random.default_rng(3).normal(size=(6000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(16), 16, 12, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    index.nprobe = 4
    lists = IvfListMajor(index)
    seen = []
    for lid in range(12):
        vec, ids = lists.inverted_list(lid)
        assert not vec.flags.owndata and not vec.flags.writeable and not ids.flags.writeable
        assert ids.dtype == np.int64 and np.array_equal(vec, x[ids])
        seen.append(ids)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(6000))
    d_ref, i_ref = index.search(x[:300], 7)
    d, i = lists.search(x[:300], 7)
    assert np.array_equal(i, i_ref) and np.allclose(d, d_ref, atol=1e-5)


def test_rounded_depths_round_up_to_a_power_of_two_at_most_the_largest() -> None:
    """Each extra depth rounded up to a power of two (0 and 1 kept), never above the
    largest one (hand-computed)."""
    from pairkit.index.search import rounded_depths

    got = rounded_depths(np.array([0, 1, 2, 3, 5, 8, 9, 100]))
    np.testing.assert_array_equal(got, [0, 1, 2, 4, 8, 8, 16, 100])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(rounded_depths(np.array([3, 3])), [3, 3])
    assert rounded_depths(np.zeros(0, np.int64)).shape == (0,)


def test_rows_are_skipped_exactly_only_by_a_flat_float32_cpu_index_or_torch() -> None:
    """Mutation audit 5a: ``search_outside`` reads a FAISS index's rows as float32 flat
    rows: only a CPU ``flat`` index in float32 allows it (a float16 one holds codes, a GPU
    one holds its rows on the GPU); the torch engine masks rows itself."""
    from pairkit.index.backend import SearchBackend
    from pairkit.index.open import excludes_exactly
    from pairkit.index.options import IndexOptions

    flat = IndexOptions(kind="flat")
    assert excludes_exactly(flat, 50)
    assert not excludes_exactly(IndexOptions(kind="flat", float16=True), 50)
    assert not excludes_exactly(flat, 50, SearchBackend("faiss", "cuda:0"))
    assert not excludes_exactly(IndexOptions(kind="hnsw"), 50)
    assert excludes_exactly(IndexOptions(kind="flat", float16=True), 50,
                            SearchBackend("torch", "cpu"))


def test_a_searcher_pads_k_above_its_rows() -> None:
    """Mutation audit 5a: k above the rows gives k columns, the missing places -1/-inf
    (callers index the columns by rank); 3 rows, k = 5, hand-computed scores."""
    from pairkit.index.open import exact_searcher

    rows = np.array([[1, 0], [0, 1], [0.6, 0.8]], np.float32)
    s, i = exact_searcher(rows).search(np.array([[0, 1]], np.float32), 5)
    assert i.tolist() == [[1, 2, 0, -1, -1]]
    np.testing.assert_allclose(s[0, :3], [1.0, 0.8, 0.0], atol=1e-6)
    assert np.isneginf(s[0, 3:]).all()
