"""Range search against brute force: random data, exact ties, empty and identical sets."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.store import l2_normalize
from pairkit.errors import PairkitError
from pairkit.index.backend import faiss_gpus
from pairkit.index.range_search import (
    float32_radius,
    range_search,
    range_search_blocks,
    self_pairs_blocks,
)


def brute_force(q: np.ndarray, b: np.ndarray, t: float) -> dict[tuple[int, int], float]:
    """Every (i, j) with q_i . b_j >= t, computed with numpy in float32."""
    s = q.astype(np.float32) @ b.astype(np.float32).T
    i, j = np.nonzero(s >= np.float32(t))
    return {(int(a), int(c)): float(s[a, c]) for a, c in zip(i, j, strict=True)}


def as_dict(rows: np.ndarray, ids: np.ndarray, scores: np.ndarray) -> dict[tuple[int, int], float]:
    out = {(int(a), int(c)): float(s) for a, c, s in zip(rows, ids, scores, strict=True)}
    assert len(out) == len(rows), "a pair was returned twice"
    return out


def assert_same_pairs(got: dict, ref: dict, t: float, scores_q_b: np.ndarray) -> None:
    # FAISS (BLAS) and numpy may round the last bit differently: only pairs within
    # 1e-5 of the threshold may disagree.
    for pair in set(got) ^ set(ref):
        assert abs(scores_q_b[pair] - t) < 1e-5, pair
    for pair in set(got) & set(ref):
        assert got[pair] == pytest.approx(ref[pair], abs=1e-5)


@pytest.mark.parametrize("method,k", [("range", 256), ("knn", 256), ("knn", 3)])
@pytest.mark.parametrize("batch_size", [1, 7, 1000])
@pytest.mark.parametrize("t", [0.2, 0.5, 0.8])
def test_matches_brute_force(method: str, k: int, batch_size: int, t: float) -> None:
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(5, 8))
    base = l2_normalize(centers[rng.integers(0, 5, 120)] + 0.6 * rng.normal(size=(120, 8)))
    queries = base[::3]
    got = as_dict(*range_search(queries, base, t, batch_size=batch_size, method=method, k=k))
    ref = brute_force(queries, base, t)
    assert len(ref) > len(queries)  # not only self-matches
    assert_same_pairs(got, ref, t, queries @ base.T)


def test_blocks_stream_in_query_order() -> None:
    rng = np.random.default_rng(1)
    x = l2_normalize(rng.normal(size=(50, 4)))
    starts = []
    for rows, ids, scores in range_search_blocks(x, x, 0.3, batch_size=16):
        assert rows.dtype == np.int64 and ids.dtype == np.int64 and scores.dtype == np.float32
        assert len(rows) == len(ids) == len(scores)
        assert np.all(np.diff(rows) >= 0)
        starts.append((int(rows.min()), int(rows.max())))
    # one block per 16 queries, each block holds only its own queries
    assert [s // 16 for s, _ in starts] == [0, 1, 2, 3]
    assert all(lo // 16 == hi // 16 for lo, hi in starts)


@pytest.mark.parametrize("method", ["range", "knn"])
def test_exact_tie_is_kept(method: str) -> None:
    # dot products 0.5 and 0 are exact in float32
    x = np.array([[1.0, 0.0], [0.5, np.sqrt(3) / 2], [0.0, 1.0]], dtype=np.float32)
    s = x @ x.T
    assert s[0, 1] == np.float32(0.5)
    got = as_dict(*range_search(x[:1], x, 0.5, method=method, k=1))
    assert set(got) == {(0, 0), (0, 1)}
    just_above = float(np.nextafter(np.float32(0.5), np.float32(1)))
    got = as_dict(*range_search(x[:1], x, just_above, method=method, k=1))
    assert set(got) == {(0, 0)}


def test_radius_is_the_float32_below_threshold() -> None:
    r = float32_radius(0.9)
    assert np.float32(r) < np.float32(0.9)
    assert np.nextafter(np.float32(r), np.float32(1)) == np.float32(0.9)


@pytest.mark.parametrize("method", ["range", "knn"])
def test_empty_result(method: str) -> None:
    eye = np.eye(10, dtype=np.float32)
    rows, ids, scores = range_search(eye[5:], eye[:5], 0.1, method=method)
    assert len(rows) == len(ids) == len(scores) == 0
    assert rows.dtype == np.int64 and scores.dtype == np.float32
    rows, _, _ = range_search(eye[:0], eye, 0.1)
    assert len(rows) == 0


@pytest.mark.parametrize("method,k", [("range", 256), ("knn", 8)])
def test_all_identical_vectors(method: str, k: int) -> None:
    x = np.zeros((40, 6), dtype=np.float32)
    x[:, 0] = 1.0  # self inner product exactly 1
    got = as_dict(*range_search(x, x, 1.0, method=method, k=k, batch_size=9))
    assert len(got) == 40 * 40
    assert set(got.values()) == {1.0}
    pairs = [p for a, b, _ in self_pairs_blocks(x, 1.0, method=method, k=k, batch_size=9)
             for p in zip(a.tolist(), b.tolist(), strict=True)]
    assert sorted(pairs) == [(i, j) for i in range(40) for j in range(i + 1, 40)]


def test_bad_arguments() -> None:
    x = np.eye(3, dtype=np.float32)
    with pytest.raises(PairkitError, match="method must be one of"):
        range_search(x, x, 0.5, method="hnsw")
    with pytest.raises(PairkitError, match="same width"):
        range_search(x, x[:, :2], 0.5)
    with pytest.raises(PairkitError, match="batch_size must be >= 1"):
        range_search(x, x, 0.5, batch_size=0)


@pytest.mark.skipif(faiss_gpus() == 0, reason="FAISS sees no GPU")
def test_gpu_matches_cpu() -> None:
    rng = np.random.default_rng(2)
    x = l2_normalize(rng.normal(size=(3000, 16)))
    x[1000:1500] = x[0]  # one query with 500 neighbours > k: re-searched exactly
    cpu = as_dict(*range_search(x, x, 0.7, device="cpu"))
    gpu = as_dict(*range_search(x, x, 0.7, device="cuda", k=64))
    assert_same_pairs(gpu, cpu, 0.7, x @ x.T)


@pytest.mark.parametrize("min_queries", [1, 5, 1024])
@pytest.mark.parametrize("method", ["range", "knn"])
def test_pieces_are_bounded(method: str, min_queries: int,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    # 60 identical rows among 200 (hunt-r 1): every piece holds at most max_pairs pairs
    # plus one query's, and the pairs are brute force's, however small the blocks get
    # (failed before: no max_pairs, a block was one yield)
    import pairkit.index.range_search as rs

    monkeypatch.setattr(rs, "MIN_QUERIES", min_queries)
    rng = np.random.default_rng(3)
    x = l2_normalize(rng.normal(size=(200, 8)))
    x[20:80] = x[20]
    got: dict[tuple[int, int], float] = {}
    for rows, ids, scores in range_search_blocks(x, x, 0.9, batch_size=50, method=method,
                                                 k=8, max_pairs=100):
        assert np.all(np.diff(rows) >= 0)
        assert len(rows) <= 100 + 60
        got.update(as_dict(rows, ids, scores))
    ref = brute_force(x, x, 0.9)
    assert_same_pairs(got, ref, 0.9, x @ x.T)
    assert len(got) == len(ref)
