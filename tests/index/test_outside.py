"""Search outside the query's clusters, against brute force with the rows filtered out."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.coded_rows import CodedRows, CodedRuns
from pairkit.index.outside import OutsideSearcher, masked_exact_search
from pairkit.index.search import knn_search


def unit(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute(x: np.ndarray, assign: np.ndarray, rows: np.ndarray, k: int, votes: int = 1):
    """One query at a time: the rows sharing the query's cluster in fewer than ``votes``
    runs, sorted by (score desc, id asc)."""
    out_s = np.full((len(rows), k), -np.inf, np.float32)
    out_i = np.full((len(rows), k), -1, np.int64)
    for r, q in enumerate(rows):
        allowed = [j for j in range(len(x))
                   if sum(assign[g, j] == assign[g, q] for g in range(len(assign))) < votes]
        sims = [(float(np.float32(x[q] @ x[j])), j) for j in allowed]
        sims.sort(key=lambda t: (-t[0], t[1]))
        for c, (s, j) in enumerate(sims[:k]):
            out_s[r, c], out_i[r, c] = s, j
    return out_s, out_i


@pytest.mark.parametrize("votes", [1, 2])
@pytest.mark.parametrize("big_group", [1, 10_000])  # every group through FAISS / numpy
def test_masked_exact_search_equals_brute_force(big_group, votes):
    x = unit(120, 6)
    x[7] = x[3]  # exact ties
    x[9] = x[3]
    rng = np.random.default_rng(1)
    assign = np.stack([rng.integers(0, 4, 120), rng.integers(0, 3, 120),
                       rng.integers(0, 2, 120)])
    rows = np.arange(0, 120, 2)
    s, i = masked_exact_search(x, assign, rows, 7, big_group=big_group, votes=votes)
    rs, ri = brute(x, assign, rows, 7, votes)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(s, rs, atol=1e-6)
    # blocks of 5 queries, which cut across the signature groups
    s, i = masked_exact_search(x, assign, rows, 7, big_group=big_group, votes=votes,
                               block_bytes=4 * 120 * 5)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(s, rs, atol=1e-6)


def test_masked_exact_search_pads_when_few_rows_are_allowed():
    x = unit(10, 3)
    assign = np.array([[0] * 8 + [1, 1]])
    s, i = masked_exact_search(x, assign, np.array([0, 8]), 5)
    assert (i[0, :2] >= 8).all() and (i[0, 2:] == -1).all() and np.isinf(s[0, 2:]).all()
    assert (i[1] >= 0).all() and (i[1] < 8).all()


def test_outside_searcher_exact_parts_equal_brute_force():
    x = unit(90, 5, seed=3)
    parts = np.random.default_rng(2).integers(0, 5, 90)

    def make(sub: np.ndarray):
        return lambda q, k: knn_search(q, sub, k)

    search = OutsideSearcher(x, parts, make).search
    rows = np.arange(90)
    s, i = search(rows, 6)
    rs, ri = brute(x, parts[None, :], rows, 6)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(s, rs, atol=1e-6)
    # searching only the nearest parts is a subset of the same order
    approx = OutsideSearcher(x, parts, make, max_parts=2).search(rows, 6)[1]
    assert ((approx == -1) | (parts[np.maximum(approx, 0)] != parts[rows][:, None])).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_masked_search_equals_masked_exact(dtype):
    from pairkit.index.torch_search import TorchFlatIndex

    x = unit(300, 16, seed=5)
    x[11] = x[4]  # a tie
    rng = np.random.default_rng(6)
    assign = np.stack([rng.integers(0, 5, 300), rng.integers(0, 4, 300)])
    rows = np.arange(0, 300, 3)
    ref_s, ref_i = masked_exact_search(x, assign, rows, 9)
    index = TorchFlatIndex(x, device="cpu", dtype=dtype, query_block=17, base_block=64)
    s, i = index.search_masked(x[rows], 9, assign[:, rows], assign)
    np.testing.assert_array_equal(i, ref_i)
    np.testing.assert_allclose(s, ref_s, atol=1e-5)
    # a query whose clusters cover almost everything: padded, like the numpy search
    assign2 = np.zeros((1, 300), np.int64)
    assign2[0, :3] = 1
    s2, i2 = index.search_masked(x[[5]], 6, assign2[:, [5]], assign2)
    r2, ri2 = masked_exact_search(x, assign2, np.array([5]), 6)
    np.testing.assert_array_equal(i2, ri2)
    assert (i2[0, 3:] == -1).all()
    # two votes needed: rows sharing one cluster only stay searchable; the cached one-hot
    # codes of the base are reused for the same array, rebuilt for another
    assign3 = np.concatenate([assign, rng.integers(0, 3, (1, 300))])
    for assign_now in (assign3, assign3, assign):
        ref_s, ref_i = masked_exact_search(x, assign_now, rows, 9, votes=2)
        s, i = index.search_masked(x[rows], 9, assign_now[:, rows], assign_now, votes=2)
        np.testing.assert_array_equal(i, ref_i)
        np.testing.assert_allclose(s, ref_s, atol=1e-5)


def test_masked_ivf_search_keeps_the_mask_and_finds_the_exact_neighbours():
    import faiss

    from pairkit.index.outside import MaskedIvfSearch

    rng = np.random.default_rng(8)
    centers = unit(6, 12, seed=9)
    lab = rng.integers(0, 6, 3000)
    x = centers[lab] + 0.35 * rng.normal(size=(3000, 12)).astype(np.float32)
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    assign = np.stack([lab, np.where(rng.random(3000) < 0.9, lab, rng.integers(0, 6, 3000))])
    quant = faiss.IndexFlatIP(12)
    index = faiss.IndexIVFFlat(quant, 12, 16, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    rows = np.arange(0, 3000, 7)
    search = MaskedIvfSearch(index, assign, nprobe=16)  # every cell: exact
    s, i = search.search(rows, 5, x[rows])
    ref_s, ref_i = masked_exact_search(x, assign, rows, 5)
    np.testing.assert_array_equal(i, ref_i)
    few = MaskedIvfSearch(index, assign, nprobe=3).search(rows, 5, x[rows])[1]
    ok = few >= 0
    shared = np.zeros(few.shape, bool)
    for r in range(2):
        shared |= assign[r][np.maximum(few, 0)] == assign[r][rows][:, None]
    assert not (shared & ok).any()  # never a row of the anchor's clusters
    recall = np.mean([len(set(a[a >= 0]) & set(b)) / 5 for a, b in zip(few, ref_i, strict=True)])
    assert recall > 0.5  # 3 of 16 cells: approximate, but most neighbours found
    # two votes: rows sharing the query's cluster in one run only are found too
    s2, i2 = MaskedIvfSearch(index, assign, nprobe=16, votes=2).search(rows, 5, x[rows])
    ref_s2, ref_i2 = masked_exact_search(x, assign, rows, 5, votes=2)
    np.testing.assert_array_equal(i2, ref_i2)
    assert (i2 != i).any()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="no CUDA GPU (the GPU suite runs this)")
def test_torch_masked_search_on_cuda_equals_cpu():
    from pairkit.index.torch_search import TorchFlatIndex

    x = unit(5000, 64, seed=12)
    rng = np.random.default_rng(13)
    assign = np.stack([rng.integers(0, 9, 5000) for _ in range(8)])
    rows = np.arange(0, 5000, 5)
    index = TorchFlatIndex(x, device="cuda")
    for votes in (1, 3):
        ref_s, ref_i = masked_exact_search(x, assign, rows, 7, votes=votes)
        s, i = index.search_masked(x[rows], 7, assign[:, rows], assign, votes=votes)
        np.testing.assert_array_equal(i, ref_i)
        np.testing.assert_allclose(s, ref_s, atol=1e-5)


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
@pytest.mark.parametrize("votes", [1, 2])
def test_outside_searcher_for_every_engine_and_kind_skips_the_rows(kind, votes):
    """``outside_searcher`` (the search ``mine`` uses when the rules would drop the
    anchor's cluster): exact on FAISS and on torch equals brute force; the approximate
    kinds never return a skipped row (one vote) or give the full search (more votes)."""
    from pairkit.index.backend import CPU, SearchBackend
    from pairkit.index.options import IndexOptions
    from pairkit.index.outside import outside_searcher

    x = unit(400, 8, seed=7)
    assign = np.random.default_rng(8).integers(0, 4, (3, 400))
    rows = np.arange(0, 400, 7)
    rs, ri = brute(x, assign, rows, 5, votes=votes)
    for engine in (CPU, SearchBackend("torch", "cpu")):
        if engine.name == "torch" and kind != "flat":
            continue
        search, text = outside_searcher(x, assign, IndexOptions(kind=kind, nlist=4, nprobe=4),
                                        engine, votes=votes)
        s, i = search(rows, 5)
        assert s.shape == (len(rows), 5) and text
        if kind == "flat" or (kind == "ivf" and engine is CPU):
            np.testing.assert_array_equal(i, ri)
        elif votes == 1:
            own = assign[0][rows][:, None] == assign[0][np.maximum(i, 0)]
            assert not (own & (i >= 0)).any()


def test_cluster_skipping_search_follows_exact_max_rows_zero():
    # --exact-max-rows 0: never exact, as the main index (open_searcher) resolves it; the
    # search that skips the anchor's clusters took 0 for "unset" and searched exactly
    from pairkit.index.backend import CPU
    from pairkit.index.options import IndexOptions
    from pairkit.index.outside import outside_searcher

    x = unit(3000, 12, seed=3)
    assign = np.random.default_rng(1).integers(0, 4, size=(2, 3000))
    _, text = outside_searcher(x, assign, IndexOptions(exact_max_rows=0, nlist=8), CPU)
    assert text.startswith("ivf") and "flat (exact)" not in text
    _, text = outside_searcher(x, assign, IndexOptions(), CPU)
    assert text.startswith("flat (exact)")
    assert IndexOptions(exact_max_rows=0).cpu_kind(10) == "ivf"
    assert IndexOptions().cpu_kind(50_000) == "flat"
    assert IndexOptions().cpu_kind(50_001) == "ivf"
    assert IndexOptions(kind="hnsw").cpu_kind(10) == "hnsw"


def brute_far(x, assign, coords, rows, k, votes, threshold):
    """:func:`brute` with the second mask: rows at a coordinate cosine >= ``threshold``
    to the query are not allowed either."""
    out_s = np.full((len(rows), k), -np.inf, np.float32)
    out_i = np.full((len(rows), k), -1, np.int64)
    c = coords.astype(np.float32)
    for r, q in enumerate(rows):
        allowed = [j for j in range(len(x))
                   if sum(assign[g, j] == assign[g, q] for g in range(len(assign))) < votes
                   and float(c[q] @ c[j]) < threshold]
        sims = sorted(((float(np.float32(x[q] @ x[j])), j) for j in allowed),
                      key=lambda t: (-t[0], t[1]))
        for col, (s, j) in enumerate(sims[:k]):
            out_s[r, col], out_i[r, col] = s, j
    return out_s, out_i


def coded_coords(n: int, table_rows: int, dims: int, seed: int) -> CodedRows:
    """Unit coordinates stored by code, as the cluster rule's are above its sample: a few
    distinct rows, each shared by many."""
    table = unit(table_rows, dims, seed=seed).astype(np.float16)
    codes = np.random.default_rng(seed + 1).integers(0, table_rows, n).astype(np.int16)
    return CodedRows(codes, table)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("coded", [False, True])
def test_coordinate_mask_exact_and_torch_equal_brute_force(dtype, coded):
    """The cluster rule's diffusion threshold as a second mask: a row is skipped when its
    coordinates' cosine to the query's is >= the threshold, whatever the votes say; the
    same with the coordinates stored by code (brute force reads them as an array)."""
    from pairkit.index.torch_search import TorchFlatIndex

    x = unit(150, 8, seed=21)
    coords = (coded_coords(150, 12, 3, seed=22) if coded
              else unit(150, 3, seed=22).astype(np.float16))
    rng = np.random.default_rng(23)
    assign = np.stack([rng.integers(0, 4, 150), rng.integers(0, 3, 150)])
    rows = np.arange(0, 150, 4)
    index = TorchFlatIndex(x, device="cpu", dtype=dtype, query_block=7, base_block=32)
    for votes, threshold in ((2, 0.5), (1, 0.2), (2, 1.01)):
        rs, ri = brute_far(x, assign, np.asarray(coords), rows, 6, votes, threshold)
        s, i = masked_exact_search(x, assign, rows, 6, votes=votes, coords=coords,
                                   threshold=threshold, block_bytes=4 * 150 * 9)
        np.testing.assert_array_equal(i, ri)
        np.testing.assert_allclose(s, rs, atol=1e-6)
        ts, ti = index.search_masked(x[rows], 6, assign[:, rows], assign, votes=votes,
                                     query_coords=coords[rows], base_coords=coords,
                                     threshold=threshold)
        np.testing.assert_array_equal(ti, ri)
        np.testing.assert_allclose(ts, rs, atol=1e-5)
    # the mask removes rows: with a threshold, fewer rows allowed than without
    _, loose = masked_exact_search(x, assign, rows, 6, votes=2)
    assert (loose != masked_exact_search(x, assign, rows, 6, votes=2, coords=coords,
                                         threshold=0.5)[1]).any()


@pytest.mark.parametrize("coded", [False, True])
def test_masked_ivf_search_with_the_coordinate_mask(coded):
    """The masked IVF search with both masks; ``coded``: the runs and the coordinates
    stored by one code per row, as the cluster rule keeps them above its sample, against
    the exact masked search of the same values as arrays."""
    import faiss

    from pairkit.index.outside import MaskedIvfSearch

    rng = np.random.default_rng(31)
    x = unit(2000, 12, seed=32)
    coords = (coded_coords(2000, 40, 4, seed=33) if coded
              else unit(2000, 4, seed=33).astype(np.float16))
    assign = np.stack([rng.integers(0, 6, 2000), rng.integers(0, 6, 2000)])
    if coded:  # labels per code, read through the coordinates' codes
        assign = CodedRuns(coords.codes, np.stack([rng.integers(0, 6, 40),
                                                   rng.integers(0, 6, 40)]).astype(np.int16))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(12), 12, 12, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    rows = np.arange(0, 2000, 9)
    every = MaskedIvfSearch(index, assign, nprobe=12, votes=2, coords=coords, threshold=0.3)
    s, i = every.search(rows, 5, x[rows])  # every cell: the exact masked search
    ref_s, ref_i = masked_exact_search(x, np.asarray(assign), rows, 5, votes=2,
                                       coords=np.asarray(coords), threshold=0.3)
    np.testing.assert_array_equal(i, ref_i)
    if coded:  # runs by code, coordinates as an array (or by other codes): the same
        for other in (np.asarray(coords), CodedRows(coords.codes.copy(), coords.table)):
            mixed = MaskedIvfSearch(index, assign, nprobe=12, votes=2, coords=other,
                                    threshold=0.3)
            np.testing.assert_array_equal(mixed.search(rows, 5, x[rows])[1], ref_i)
    # one vote: the cells whose rows all share the query's first-run cluster are not probed
    one = MaskedIvfSearch(index, assign, nprobe=12, votes=1).search(rows, 5, x[rows])[1]
    np.testing.assert_array_equal(
        one, masked_exact_search(x, np.asarray(assign), rows, 5, votes=1)[1])
    few = MaskedIvfSearch(index, assign, nprobe=2, votes=2, coords=coords,
                          threshold=0.3).search(rows, 5, x[rows])[1]
    c = np.asarray(coords).astype(np.float32)
    ok = few >= 0
    near = np.einsum("nd,nkd->nk", c[rows], c[np.maximum(few, 0)]) >= 0.3
    assert ok.any() and not (near & ok).any()  # never a row the threshold skips


def test_masked_exact_search_with_many_tied_scores_equals_brute_force():
    # vectors on a coarse grid: many equal scores, also at the k-th place, where the
    # masked top-k must keep the lowest ids (its heaps settle such ties over the row)
    rng = np.random.default_rng(41)
    # four entries of +-0.5 in 8 dims: unit rows whose scores are multiples of 0.25, exact
    # in float32 whatever the order of the sums (a matrix product or one dot at a time)
    x = np.zeros((160, 8), np.float32)
    for r in range(160):
        x[r, rng.choice(8, 4, replace=False)] = rng.choice([-0.5, 0.5], 4)
    assign = np.stack([rng.integers(0, 3, 160), rng.integers(0, 2, 160)])
    coords = unit(160, 3, seed=42).astype(np.float16)
    rows = np.arange(0, 160, 3)
    for votes in (1, 2):
        rs, ri = brute(x, assign, rows, 9, votes)
        s, i = masked_exact_search(x, assign, rows, 9, votes=votes, big_group=10_000)
        np.testing.assert_array_equal(i, ri)
        np.testing.assert_allclose(s, rs, atol=1e-6)
        rs, ri = brute_far(x, assign, coords, rows, 9, votes, 0.3)
        s, i = masked_exact_search(x, assign, rows, 9, votes=votes, coords=coords,
                                   threshold=0.3)
        np.testing.assert_array_equal(i, ri)
        np.testing.assert_allclose(s, rs, atol=1e-6)


def blobs_ivf(n: int, nlist: int, *, noise: float, moved: float, seed: int):
    """``(x, assign, index)``: ``n`` unit rows around 8 centres in 12 dims, two cluster
    runs (the blobs; the second moves a share ``moved`` of the rows to the next blob)
    and an ``nlist``-cell IVF index of the rows."""
    import faiss

    rng = np.random.default_rng(seed)
    centers = unit(8, 12, seed=seed + 1)
    lab = rng.integers(0, 8, n)
    x = centers[lab] + noise * rng.normal(size=(n, 12)).astype(np.float32)
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    assign = np.stack([lab, np.where(rng.random(n) < 1 - moved, lab, (lab + 1) % 8)])
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(12), 12, nlist, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    return x, assign, index


def test_masked_ivf_search_widens_the_probes_of_a_query_found_short():
    """A query whose probed cells hold fewer than k allowed rows is searched again with
    more cells (a short result would read as "the store is exhausted" and leave its
    anchor with fewer negatives): every query gets k while the store has them, most of
    them the exact masked search's, none of them masked."""
    from pairkit.index.outside import MaskedIvfSearch

    # two runs; votes 2: the rows of the query's blob are skipped unless the second run
    # moved them, so the cells near a query hold almost no allowed row
    x, assign, index = blobs_ivf(4000, 32, noise=0.2, moved=0.005, seed=41)
    rows = np.arange(0, 4000, 11)
    s, i = MaskedIvfSearch(index, assign, nprobe=2, votes=2).search(rows, 5, x[rows])
    assert (i >= 0).all()  # nobody short: the store has far more than 5 allowed rows
    ref_s, ref_i = masked_exact_search(x, assign, rows, 5, votes=2)
    assert np.mean(i == ref_i) > 0.5
    shared = (assign[:, np.maximum(i, 0)] == assign[:, rows][:, :, None]).sum(axis=0)
    assert (shared < 2).all()  # the mask still holds


def test_masked_ivf_search_widening_scans_each_cell_once(monkeypatch):
    """A query found short is searched again in its next cells only: each (query, cell)
    is scanned once, and the merged result is the search of all its cells at once. The
    reference: per query, the rows of its P best useful cells by centroid score (P the
    search's, 4x more each time fewer than k allowed rows came back), masked, top k by
    score then id."""
    from pairkit.index import outside

    x, assign, index = blobs_ivf(3000, 40, noise=0.25, moved=0.01, seed=51)
    coords = unit(3000, 4, seed=53).astype(np.float16)
    cell_of = np.asarray(index.quantizer.search(x, 1)[1]).ravel()
    # as arrays: once faiss.contrib.torch_utils is loaded (other tests) FAISS hands tensors
    centroids = np.asarray(index.quantizer.reconstruct_n(0, 40), dtype=np.float32)
    rows = np.arange(0, 3000, 7)
    scans: list[tuple[int, int]] = []
    far_in = outside.far_in

    def spy(c, query_rows, threshold, cols=None):
        scans.extend((int(q), int(cell_of[cols[0]])) for q in query_rows)
        return far_in(c, query_rows, threshold, cols)

    monkeypatch.setattr(outside, "far_in", spy)
    for votes, nprobe, k in ((2, 1, 5), (1, 2, 7), (2, 3, 40)):
        scans.clear()
        search = outside.MaskedIvfSearch(index, assign, nprobe=nprobe, votes=votes,
                                         coords=coords, threshold=1.5)  # nothing far-masked
        s, i = search.search(rows, k, x[rows])
        assert len(scans) == len(set(scans))  # no (query, cell) twice
        widened = 0
        for n, q in enumerate(rows):
            coarse = x[q] @ centroids.T
            if votes == 1:  # cells all in the query's first-run cluster: never probed
                coarse[search.dominant == assign[0, q]] = -np.inf
            order = np.argsort(-coarse, kind="stable")
            p = min(40, nprobe * max(1, -(-k // 32)))
            while True:
                cells = [c for c in order[:p] if np.isfinite(coarse[c])]
                cand = np.flatnonzero(np.isin(cell_of, cells))
                ok = (assign[:, cand] == assign[:, [q]]).sum(axis=0) < votes
                cand = cand[ok]
                sc = x[cand] @ x[q]
                top = np.lexsort((cand, -sc))[:k]
                if len(top) >= k or p >= 40:
                    break
                p, widened = min(40, 4 * p), widened + 1
            got = i[n][i[n] >= 0]
            np.testing.assert_array_equal(got, cand[top])
            np.testing.assert_allclose(s[n][: len(got)], sc[top], atol=1e-6)
        assert widened > 0  # the case widens


def test_far_in_a_cosine_exactly_at_the_threshold_is_not_far() -> None:
    """The masked search skips what the cluster rule flags (diffusion cosine >= threshold):
    a cosine exactly at the threshold is not far, so it is not searched."""
    from pairkit.index.outside import far_in

    coords = np.array([[1.0, 0.0], [0.5, 0.8660254]], np.float32)
    assert float(coords[0] @ coords[1]) == 0.5  # exactly, in float32
    np.testing.assert_array_equal(far_in(coords, np.array([0]), 0.5), [[False, False]])
    np.testing.assert_array_equal(far_in(coords, np.array([0]), 0.5001), [[False, True]])


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int64])
def test_masked_exact_search_groups_as_np_unique_axis0(monkeypatch, dtype):
    """The queries' cluster signatures come from core/unique.unique_rows (fix-small), not
    np.unique(axis=0): the same results as with the latter, in the dtypes the cluster rule
    keeps its runs in (-1 among the signed ones)."""
    import pairkit.core.unique as unique

    x = unit(300, 5, seed=3)
    rng = np.random.default_rng(4)
    low = 0 if np.dtype(dtype).kind == "u" else -1
    assign = rng.integers(low, 4, (3, 300)).astype(dtype)
    rows = np.arange(0, 300, 3)
    got = [masked_exact_search(x, assign, rows, 6, votes=v, big_group=b)
           for v in (1, 2) for b in (5, 10_000)]

    def numpy_rows(rows: np.ndarray):  # noqa: ANN202 - the code before
        uniq, index, inverse = np.unique(rows, axis=0, return_index=True,
                                         return_inverse=True)
        return uniq, index, np.asarray(inverse).ravel()

    monkeypatch.setattr(unique, "unique_rows", numpy_rows)
    want = [masked_exact_search(x, assign, rows, 6, votes=v, big_group=b)
            for v in (1, 2) for b in (5, 10_000)]
    for (gs, gi), (ws, wi) in zip(got, want, strict=True):
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gs, ws)


@pytest.mark.parametrize("nprobe", [1, 2, 16])
def test_masked_ivf_search_skipping_big_sources_is_the_fetch_without_them(nprobe):
    """The IVF search made to skip the anchor's own big source (mine, instance relation,
    ``AnchorSearch.skipping_sources``) gives what the search fetching k + the source's
    rows gives once those are dropped: the same cells probed (its k counts the source's
    rows), the same top k of the rest (failed before: the IVF search could not skip, so
    such anchors fetched and held the whole source)."""
    import faiss

    from pairkit.index.outside import AnchorSearch, MaskedIvfSearch

    rng = np.random.default_rng(4)
    n, d = 2400, 12
    x = unit(n, d, seed=5)
    x[:700] = x[0] + 0.2 * rng.normal(size=(700, d)).astype(np.float32)  # a big source
    x[700:900] = x[800] + 0.2 * rng.normal(size=(200, d)).astype(np.float32)  # another
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    codes = np.full(n, -1, dtype=np.int64)
    codes[:700], codes[700:900] = 0, 1
    assign = rng.integers(0, 40, (2, n))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, 16, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    plain = AnchorSearch("ivf", x, assign, 1, MaskedIvfSearch(index, assign, nprobe=nprobe))
    skipping = plain.skipping_sources(codes)
    assert skipping is not None and plain.inner.skip is None  # the original is untouched
    rows = np.r_[np.arange(0, 700, 9), np.arange(700, 900, 7), np.arange(900, n, 11)]
    k = 6
    s, i = skipping(rows, k)
    sizes = np.bincount(codes[codes >= 0])
    for r, (got_s, got_i) in enumerate(zip(s, i, strict=True)):
        own = codes[rows[r]]
        deep = k + (int(sizes[own]) if own >= 0 else 0)
        ws, wi = plain(rows[r : r + 1], deep)
        keep = (wi[0] >= 0) & ((codes[np.maximum(wi[0], 0)] != own) | (own < 0))
        want_i, want_s = wi[0][keep][:k], ws[0][keep][:k]
        np.testing.assert_array_equal(got_i[: len(want_i)], want_i)
        # one query against a block of them: BLAS may round the products differently
        np.testing.assert_allclose(got_s[: len(want_s)], want_s, atol=1e-6)
        assert (got_i[len(want_i):] == -1).all()
        if own >= 0:
            assert not (codes[np.maximum(got_i, 0)][got_i >= 0] == own).any()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _cuda(), reason="no CUDA GPU (the GPU suite runs this)"))])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("votes", [1, 2])
def test_torch_masked_search_skipping_big_sources_equals_the_exact_one(dtype, votes, device):
    """The torch search (the GPU's, no FAISS there) made to skip the anchor's own big
    source gives the exact search's skipping result, and what fetching k + the source's
    rows gives once those are dropped (failed before: it could not skip, so each anchor
    of a big source fetched and held all of its rows: `mine --backend torch
    --filter-false-negatives` on 8,000 rows with a 3,000-row source peaked at 5.2 GB)."""
    from pairkit.index.outside import AnchorSearch
    from pairkit.index.torch_search import TorchFlatIndex

    rng = np.random.default_rng(7)
    n, d = 900, 12
    x = unit(n, d, seed=8)
    x[:300] = x[0] + 0.2 * rng.normal(size=(300, d)).astype(np.float32)  # a big source
    x[300:380] = x[320] + 0.2 * rng.normal(size=(80, d)).astype(np.float32)  # another
    x[500] = x[501]  # a tie
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    codes = np.full(n, -1, dtype=np.int64)
    codes[:300], codes[300:380] = 0, 1
    assign = rng.integers(0, 12, (2, n))
    coords = unit(n, 4, seed=9)
    index = TorchFlatIndex(x, device=device, dtype=dtype, query_block=17, base_block=64)
    plain = AnchorSearch("torch", x, assign, votes, index, coords=coords, threshold=0.8)
    skipping = plain.skipping_sources(codes)
    assert skipping is not None and plain.skip is None  # the original is untouched
    rows = np.r_[np.arange(0, 300, 7), np.arange(300, 380, 3), np.arange(380, n, 5)]
    k = 6
    s, i = skipping(rows, k)
    ref_s, ref_i = masked_exact_search(x, assign, rows, k, votes=votes, coords=coords,
                                       threshold=0.8, skip=codes)
    np.testing.assert_array_equal(i, ref_i)
    np.testing.assert_allclose(s, ref_s, atol=1e-5)
    sizes = np.bincount(codes[codes >= 0])
    for r in range(0, len(rows), 4):
        own = codes[rows[r]]
        ws, wi = plain(rows[r : r + 1], k + (int(sizes[own]) if own >= 0 else 0))
        keep = (wi[0] >= 0) & ((codes[np.maximum(wi[0], 0)] != own) | (own < 0))
        np.testing.assert_array_equal(i[r][: keep.sum()], wi[0][keep][:k])
        if own >= 0:
            assert not (codes[np.maximum(i[r], 0)][i[r] >= 0] == own).any()
