"""The exact torch search (CPU here) against brute force and FAISS flat."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.index.range_search import range_search
from pairkit.index.search import knn_search
from pairkit.index.torch_search import TorchFlatIndex, block_topk, error_bound, torch_knn
from tests.index.test_search import brute_force


def _unit(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(2, n // 50), d))
    x = centres[rng.integers(0, len(centres), n)] + 0.4 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("chunk", [0, 8])
@pytest.mark.parametrize("k", [1, 10, 299, 300, 305])
def test_matches_brute_force(dtype: str, chunk: int, k: int) -> None:
    base = clustered(300, 24)
    queries = _unit(37, 24, seed=1)
    index = TorchFlatIndex(base, dtype=dtype, query_block=16, base_block=64, chunk=chunk,
                           margin=3)
    scores, ids = index.search(queries, k)
    ref_s, ref_i = brute_force(queries, base, k)
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=2e-6)
    if k > 300:
        assert (ids[:, 300:] == -1).all() and np.isneginf(scores[:, 300:]).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_same_neighbours_as_faiss_flat(dtype: str) -> None:
    """Exactly the float64 brute force; FAISS flat too, but for neighbours whose true
    scores differ by less than float32 rounding: FAISS's own float32 GEMM may order such
    a near-tie either way (faiss-cpu 1.15's AVX512 kernels swap one pair here)."""
    base = clustered(4000, 64, seed=2)
    queries = base[::7]
    ref_s, ref_i = knn_search(queries, base, 14)
    scores, ids = torch_knn(queries, base, 14, dtype=dtype, query_block=200, base_block=1024)
    exact_s, exact_i = brute_force(queries, base, 14)
    np.testing.assert_array_equal(ids, exact_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-6)
    rows, cols = np.nonzero(ids != ref_i)
    assert len(rows) <= 0.001 * ids.size
    for r, c in zip(rows, cols, strict=True):
        pair = base[[ids[r, c], ref_i[r, c]]].astype(np.float64) @ queries[r].astype(np.float64)
        assert abs(pair[0] - pair[1]) < 1e-6, (r, c, pair)


def test_float16_store_rows_are_exact_inputs() -> None:
    base = clustered(2000, 32, seed=3).astype(np.float16)
    index = TorchFlatIndex(base, dtype="float16", base_block=512, query_block=128)
    assert index.base_exact_input  # float16 rows need no input-rounding term
    scores, ids = index.search(base.astype(np.float32)[:300], 9)
    ref_s, ref_i = brute_force(base.astype(np.float32)[:300], base.astype(np.float32), 9)
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_ties_and_duplicates_like_a_stable_sort(dtype: str) -> None:
    rng = np.random.default_rng(3)
    base = rng.integers(-1, 2, size=(500, 4)).astype(np.float32)  # many exact ties
    base[100:160] = base[7]  # 61 copies of one row
    queries = np.concatenate([rng.integers(-1, 2, size=(30, 4)).astype(np.float32),
                              base[7:8]])
    index = TorchFlatIndex(base, dtype=dtype, query_block=8, base_block=128, chunk=8,
                           margin=2)
    for k in (1, 5, 37, 70):
        scores, ids = index.search(queries, k)
        ref_s, ref_i = brute_force(queries, base, k)
        np.testing.assert_array_equal(ids, ref_i)
        np.testing.assert_array_equal(scores, ref_s)
    assert index.counts["rows_searched_again"] > 0  # the ties needed a deeper pass


def test_chunked_preselection_keeps_the_top() -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(50, 4096, generator=g)
    for kp in (1, 7, 40, 300):
        vals, cols = block_topk(scores, kp, 64)
        ref = scores.topk(kp, dim=1).values
        got = torch.sort(vals, dim=1, descending=True).values
        assert torch.equal(got, ref)
        assert torch.equal(scores.gather(1, cols), vals)


def test_error_bound_covers_the_rounding() -> None:
    import torch

    x = _unit(500, 128, seed=4)
    exact = x.astype(np.float64) @ x.astype(np.float64).T
    for dtype, tdt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        t = torch.from_numpy(x).to(tdt)
        low = (t @ t.T).double().numpy()
        assert np.abs(low - exact).max() <= error_bound(128, dtype, False)
    assert error_bound(128, "float16", True) < error_bound(128, "float16", False)


def dense_band(seed: int, d: int = 32, n: int = 64, step: float = 3e-5
               ) -> tuple[np.ndarray, np.ndarray]:
    """A query q and a base whose first ``n`` rows score 0.5 + j * ``step`` (j a
    permutation of 0..n-1) against it in float32, with random directions orthogonal to q
    (so the low-precision rounding of each row's score differs in sign: the order inside
    the band is scrambled), then ``n`` rows orthogonal to q (score ~0)."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=d)
    q /= np.linalg.norm(q)

    def orthogonal(m: int) -> np.ndarray:
        r = rng.normal(size=(m, d))
        r -= np.outer(r @ q, q)
        return r / np.linalg.norm(r, axis=1, keepdims=True)

    alpha = 0.5 + step * rng.permutation(n)
    band = alpha[:, None] * q + np.sqrt(1 - alpha ** 2)[:, None] * orthogonal(n)
    return q[None].astype(np.float32), np.concatenate([band, orthogonal(n)]).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_certificate_holds_inside_the_rounding_band(dtype: str) -> None:
    """64 rows within 2e-3 of each other, below the float16 / bfloat16 rounding of a
    score: the k' = 10 low-precision candidates of k = 8 (margin 0) miss some of the
    true top 8. The certificate (k-th exact score > k'-th low score + eps) must send
    those queries back for a wider search: the ids equal the float64 brute force. (A
    certificate without its eps let 16 of these 20 through wrong.)"""
    again = 0
    for seed in range(10):
        q, base = dense_band(seed)
        index = TorchFlatIndex(base, dtype=dtype, margin=0)
        assert index.kprime(8) == 10
        _, ids = index.search(q, 8)
        np.testing.assert_array_equal(ids, brute_force(q, base, 8)[1], err_msg=str(seed))
        again += index.counts["rows_searched_again"]
    assert again > 0


def test_bounded_blocks_and_empty_inputs() -> None:
    base = _unit(50, 8)
    index = TorchFlatIndex(base, query_block=4, base_block=16)
    s, i = index.search(np.zeros((0, 8), np.float32), 5)
    assert s.shape == (0, 5) and i.shape == (0, 5)
    s, i = index.search(base[:3], 0)
    assert s.shape == (3, 0)
    with pytest.raises(Exception, match="dtype must be one of"):
        TorchFlatIndex(base, dtype="int8")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_range_pairs_match_faiss(dtype: str) -> None:
    x = clustered(1500, 32, seed=5)
    x[10] = x[11]  # an exact copy
    t = 0.8
    ref = range_search(x, x, t, method="range", device="cpu", batch_size=200)
    index = TorchFlatIndex(x, dtype=dtype, query_block=128, base_block=256)
    parts = list(index.range_blocks(x, t, batch_size=300))
    got = tuple(np.concatenate(p) for p in zip(*parts, strict=True))
    exact = x.astype(np.float64) @ x.astype(np.float64).T
    far = np.abs(exact - t) > 1e-6  # pairs this close to t may fall either way

    def pairs(r: np.ndarray, c: np.ndarray) -> set[tuple[int, int]]:
        return {(a, b) for a, b in zip(r.tolist(), c.tolist(), strict=True) if far[a, b]}

    assert pairs(got[0], got[1]) == pairs(ref[0], ref[1])
    assert len(got[0]) > len(x)  # more than the diagonal
    np.testing.assert_allclose(got[2], exact[got[0], got[1]], atol=1e-6)
    assert (np.diff(got[0]) >= 0).all()
    near_one = list(index.range_blocks(x[10:11], 0.99999))
    assert set(near_one[0][1].tolist()) == {10, 11}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_range_pairs_just_above_a_small_threshold_at_high_dimension(dtype: str) -> None:
    """d = 1024 and t = 0.001, where the lowering by 2u|t| is nearly nothing: 100 rows
    per query at t + j * 4e-6 and 100 at t - j * 4e-6 (j = 1..100; the rest of each row
    orthogonal to its query). Only the error bound's lowering keeps every pair >= t;
    the pairs equal the float64 brute force (those within 2e-6 of t may fall either way).
    (Without the eps_unit term 5 (float16) / 17 (bfloat16) pairs went missing.)"""
    rng = np.random.default_rng(0)
    d, t, n = 1024, 0.001, 100
    queries, rows = [], []
    for _ in range(4):
        q = rng.normal(size=d)
        q /= np.linalg.norm(q)
        r = rng.normal(size=(2 * n, d))
        r -= np.outer(r @ q, q)
        r /= np.linalg.norm(r, axis=1, keepdims=True)
        alpha = t + 4e-6 * np.concatenate([np.arange(1, n + 1), -np.arange(1, n + 1)])
        rows.append(alpha[:, None] * q + np.sqrt(1 - alpha ** 2)[:, None] * r)
        queries.append(q)
    q32 = np.array(queries, np.float32)
    base = np.concatenate(rows).astype(np.float32)
    index = TorchFlatIndex(base, dtype=dtype)
    got = tuple(np.concatenate(p) for p in zip(*index.range_blocks(q32, t), strict=True))
    exact = q32.astype(np.float64) @ base.astype(np.float64).T
    far = np.abs(exact - t) > 2e-6

    def pairs(r: np.ndarray, c: np.ndarray) -> set[tuple[int, int]]:
        return {(a, b) for a, b in zip(r.tolist(), c.tolist(), strict=True) if far[a, b]}

    want = np.nonzero(exact >= t)
    assert len(want[0]) >= 4 * n
    assert pairs(got[0], got[1]) == pairs(*want)
    np.testing.assert_allclose(got[2], exact[got[0], got[1]], atol=1e-6)


def test_range_search_blocks_torch_backend() -> None:
    x = clustered(600, 16, seed=6)
    ref = range_search(x, x, 0.9, method="range", device="cpu")
    got = range_search(x, x, 0.9, device="cpu", backend="torch", batch_size=100)
    exact = x.astype(np.float64) @ x.astype(np.float64).T
    far = np.abs(exact - 0.9) > 1e-6
    a = {(i, j) for i, j in zip(*got[:2], strict=True) if far[i, j]}
    b = {(i, j) for i, j in zip(*ref[:2], strict=True) if far[i, j]}
    assert a == b


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU (the GPU suite runs this)")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_search_and_ranges_match_brute_force(dtype: str) -> None:
    _search_and_ranges_match_brute_force("cuda", dtype)


@pytest.mark.parametrize("dtype", ["float16"])
def test_search_and_ranges_at_size_match_brute_force(dtype: str) -> None:
    """The CUDA test's sizes and assertions, on the CPU (the float32 near-ties of these
    20,000 rows are what its tolerance is for)."""
    _search_and_ranges_match_brute_force("cpu", dtype)


def _search_and_ranges_match_brute_force(device: str, dtype: str) -> None:
    base = clustered(20000, 64, seed=7)
    queries = base[::13]
    index = TorchFlatIndex(base, device=device, dtype=dtype, query_block=512, base_block=4096)
    scores, ids = index.search(queries, 25)
    ref_s, ref_i = brute_force(queries, base, 25)
    np.testing.assert_allclose(scores, ref_s, atol=2e-6)
    # the float64 order, but for neighbours whose true scores differ by less than float32
    # rounding of a 64-term sum (a handful of 38,475 here): either order is exact in float32
    rows, cols = np.nonzero(ids != ref_i)
    assert len(rows) <= 0.001 * ids.size
    exact64 = queries.astype(np.float64) @ base.astype(np.float64).T
    for r, c in zip(rows, cols, strict=True):
        assert abs(exact64[r, ids[r, c]] - exact64[r, ref_i[r, c]]) < 1e-6, (r, c)
    got = tuple(np.concatenate(p) for p in zip(*index.range_blocks(queries, 0.8), strict=True))
    exact = exact64
    r, c = np.nonzero(exact >= 0.8 + 1e-6)
    assert {(a, b) for a, b in zip(r, c, strict=True)} <= set(zip(*got[:2], strict=True))
    assert (exact[got[0], got[1]] >= 0.8 - 1e-6).all()


@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU (the GPU suite runs this)")
def test_cuda_kmeans_objective() -> None:
    from pairkit.index.kmeans import spherical_kmeans, torch_spherical_kmeans

    x = clustered(6000, 32, seed=8)
    a, c = torch_spherical_kmeans(x, 40, seed=0, device="cuda")
    a2, c2 = spherical_kmeans(x, 40, seed=0)

    def obj(a: np.ndarray, c: np.ndarray) -> float:
        return float(np.mean(np.einsum("nd,nd->n", x, c[a])))

    assert abs(obj(a, c) - obj(a2, c2)) <= 0.02 * obj(a2, c2)
