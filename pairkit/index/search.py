"""The one kNN search that every command uses.

Scores are inner products; on L2-normalised rows that is cosine similarity.
Queries are searched in blocks, so memory is O(batch_size x k) for results
plus the index itself (FAISS's exact search itself tiles the base): never N x N.

Results are ordered by score, best first, ties by ascending id, so an exact
search returns the same ids as a brute-force stable sort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

# FAISS GPU indices answer at most k = 2048 neighbours per query (GPU k-selection limit).
GPU_MAX_K = 2048
# row-wise work on a block of results (the sort below; eval's compaction and metrics) is
# done this many bytes of temporaries at a time: the same result, memory O(chunk) beyond
# the block's own (scores, ids), however large k is
ROW_CHUNK_BYTES = 1 << 25
# sort_results' temporaries per result (float64 keys, order, the sorted copies)
SORT_BYTES = 64


def row_chunks(n_rows: int, row_bytes: int, chunk_bytes: int | None = None,
               ) -> Iterator[slice]:
    """Slices of ``range(n_rows)`` in order, each of at most ``chunk_bytes //
    row_bytes`` rows (at least one; ``chunk_bytes`` None: :data:`ROW_CHUNK_BYTES`)."""
    budget = ROW_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    step = max(1, budget // max(1, row_bytes))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def as_float32(x: np.ndarray) -> np.ndarray:
    """C-contiguous float32 view or copy of ``x`` (what FAISS needs); float16 rows
    converted by :func:`pairkit.core.float16.to_float32` (the same values)."""
    from pairkit.core.float16 import to_float32

    return to_float32(np.asarray(x))


def row_dots(
    vectors: np.ndarray, a: np.ndarray, b: np.ndarray, *, dtype: Any = np.float32,
    chunk: int = 2048,
) -> np.ndarray:
    """Inner products ``vectors[a[i]] . vectors[b[i]]``, shape (len(a),), in ``dtype``,
    gathered and multiplied ``chunk`` pairs at a time (memory O(chunk x d), small enough
    to stay in cache). Rows of ``a`` or ``b`` evenly spaced (a run of consecutive rows:
    the anchors of a store; every other row: the two views of each source) are read in
    place, as a strided view, instead of gathered. Each product is the same whatever the
    chunk and however its rows are read."""
    a = np.asarray(a)
    b = np.asarray(b)
    out = np.empty(len(a), dtype=dtype)
    for s in range(0, len(a), chunk):
        va = _rows(vectors, a[s : s + chunk], dtype)
        vb = _rows(vectors, b[s : s + chunk], dtype)
        out[s : s + chunk] = np.einsum("nd,nd->n", va, vb)
    return out


def _rows(vectors: np.ndarray, ids: np.ndarray, dtype: Any) -> np.ndarray:
    """``vectors[ids]`` in ``dtype``: a strided view when ``ids`` step evenly upwards."""
    if len(ids) > 1:
        step = int(ids[1]) - int(ids[0])
        last = int(ids[0]) + step * (len(ids) - 1)
        if (step > 0 and int(ids[0]) >= 0 and int(ids[-1]) == last < len(vectors)
                and bool((np.diff(ids) == step).all())):
            return np.asarray(vectors[int(ids[0]) : last + 1 : step], dtype=dtype)
    return np.asarray(vectors[ids], dtype=dtype)


def flat_index(base: np.ndarray) -> Any:
    """An exact inner-product FAISS index holding ``base`` (N, d)."""
    from pairkit.core.threads import import_faiss

    faiss = import_faiss()
    base = as_float32(base)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(base)
    return index


class ArrayIndex:
    """An exact inner-product search of an (N, d) array in place: ``faiss.knn`` (the
    brute-force kernel of ``IndexFlatIP``, same results) without copying the rows into an
    index first. What :func:`knn_search` uses for an array."""

    def __init__(self, base: np.ndarray) -> None:
        self.base = as_float32(base)
        self.ntotal = int(self.base.shape[0])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        from pairkit.core.threads import import_faiss

        faiss = import_faiss()
        return faiss.knn(as_float32(queries), self.base, k,
                         metric=faiss.METRIC_INNER_PRODUCT)


def is_gpu_index(index: Any) -> bool:
    """True for FAISS GPU indices (and shards of them), whose search caps k at 2048."""
    names = {type(index).__name__}
    if hasattr(index, "this"):  # a SWIG object: look at its concrete type too
        import faiss

        names.add(type(faiss.downcast_index(index)).__name__)
    return any(n.startswith(("Gpu", "IndexShards", "IndexReplicas")) for n in names)


def cpu_copy(index: Any) -> Any:
    """A CPU copy of a GPU index (used when k exceeds the GPU limit)."""
    import faiss

    return faiss.index_gpu_to_cpu(index)


def sort_results(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order each row by score descending, ties by ascending id; -1 ids last.

    Returns new ``(scores, ids)`` of the same shape (n, k).
    """
    if scores.size == 0:
        return scores, ids
    key_ids = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    order = np.lexsort((key_ids, -scores.astype(np.float64)), axis=1)
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def rounded_depths(extra: np.ndarray) -> np.ndarray:
    """Each query's extra search depth (its own excluded rows: its source, its positives)
    rounded up to a power of two, at most the largest of them (int64): a block's queries
    then share a few distinct k, one search each, and a query of a small source does not
    fetch the largest source's size."""
    extra = np.asarray(extra, dtype=np.int64)
    if not extra.size:
        return extra.copy()
    up = 1 << np.ceil(np.log2(np.maximum(extra, 1))).astype(np.int64)
    return np.minimum(np.where(extra > 1, up, extra), int(extra.max()))


def kept_first(scores: np.ndarray, ids: np.ndarray, keep: np.ndarray, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first ``k`` entries where ``keep`` (a bool array of their shape) holds,
    in their order (a stable compaction of a best-first result): ``(scores, ids)`` of
    width ``min(k, width)``, score -inf and id -1 where a row keeps fewer."""
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    kept = np.take_along_axis(keep, order, axis=1)
    s = np.take_along_axis(scores, order, axis=1)
    i = np.take_along_axis(ids, order, axis=1)
    s[~kept] = -np.inf
    i[~kept] = -1
    return s, i


def knn_search(
    queries: np.ndarray,
    index: Any,
    k: int,
    *,
    batch_size: int = 8192,
    cpu_fallback: Any = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Search ``queries`` (nq, d) against a FAISS ``index`` (or an (N, d) array).

    Returns ``(scores, ids)`` of shape (nq, k): float32 similarities, best first
    (ties by ascending id), and int64 row ids; where the index holds fewer than
    k rows (or an approximate index finds fewer) the tail is padded with id -1
    and score -inf.

    Ties at the k-th place are resolved like a stable sort (lowest ids kept): one
    extra neighbour is fetched, and rows whose k-th and (k+1)-th scores tie are
    searched again deeper. On a GPU index, k > 2048 is searched on
    ``cpu_fallback`` (a CPU index with the same rows) or on a CPU copy of the
    index, never passed to the GPU. ``progress(m)`` is called after each block of ``m``
    queries (they add up to ``nq``; the torch search: once, for all of them).
    """
    if isinstance(index, np.ndarray):
        index = ArrayIndex(index)
    if getattr(index, "exact_ties", False):  # the torch search: exact, ties by id, any k
        found = index.search(queries, k)
        if progress is not None:
            progress(len(queries))
        return found
    nq = len(queries)

    def padding() -> tuple[np.ndarray, np.ndarray]:
        return (np.full((nq, k), -np.inf, dtype=np.float32),
                np.full((nq, k), -1, dtype=np.int64))

    if nq == 0 or k == 0:
        return padding()
    ntotal = int(index.ntotal)
    kk = min(k, ntotal)
    if kk == 0:
        return padding()
    fallback: list[Any] = [cpu_fallback]

    def run(block: np.ndarray, kq: int) -> tuple[np.ndarray, np.ndarray]:
        target = index
        if kq > GPU_MAX_K and is_gpu_index(index):
            if fallback[0] is None:
                fallback[0] = cpu_copy(index)
            target = fallback[0]
        d, i = target.search(block, kq)
        if not (d.dtype == np.float32 and i.dtype == np.int64 and d.flags.writeable
                and i.flags.writeable):
            d, i = d.astype(np.float32), i.astype(np.int64)
        # sorted in place, some rows at a time (row by row the same as all at once)
        for rows in row_chunks(len(d), kq * SORT_BYTES):
            d[rows], i[rows] = sort_results(np.where(i[rows] >= 0, d[rows], -np.inf), i[rows])
        return d, i

    step = int(getattr(index, "query_batch", 0) or batch_size)  # list-major: more at once
    # the outputs are made after the first search: not beside FAISS's working memory for a
    # large k (its reservoir, 2k scores and ids per query) when one block is all
    for start in range(0, nq, step):
        block = as_float32(queries[start : start + step])
        kq = min(kk + 1, ntotal)
        d, i = run(block, kq)
        if start == 0:
            scores, ids = padding()
        out_d, out_i = d[:, :kk], i[:, :kk]  # (d, i are this block's own)
        if kq > kk:
            tied = np.flatnonzero((d[:, kk] == d[:, kk - 1]) & (i[:, kk] >= 0))
            while len(tied):
                kq = min(2 * kq, ntotal)
                d2, i2 = run(block[tied], kq)
                out_d[tied], out_i[tied] = d2[:, :kk], i2[:, :kk]
                if kq >= ntotal:
                    break
                # the whole tie group is in only when the last fetched score is lower
                tied = tied[(d2[:, -1] == d2[:, kk - 1]) & (i2[:, -1] >= 0)]
        scores[start : start + len(block), :kk] = out_d
        ids[start : start + len(block), :kk] = out_i
        if progress is not None:
            progress(len(block))
    return scores, ids


def exact_scores(queries: np.ndarray, base: np.ndarray, ids: np.ndarray,
                 batch_size: int = 1024) -> np.ndarray:
    """Exact inner products of ``queries[i]`` with ``base[ids[i, j]]``: float32 (nq, k).

    ``-inf`` where ``ids`` is -1. Used to re-score candidates of a lossy index. A float32
    C-contiguous ``base`` (an array or a memory map) is read in place by FAISS's
    ``fvec_inner_products_by_idx`` (~10x faster than gathering the rows: measured in
    docs/benchmarks.md); any other goes through :func:`gathered_scores`. Memory:
    O(batch_size x d) in place, O(batch_size x k x d) gathered.
    """
    ids = np.asarray(ids)
    if ids.size and int(ids.max()) >= len(base):
        raise IndexError(f"id {int(ids.max())} out of range for {len(base)} rows")
    if not isinstance(base, np.ndarray) and ids.ndim == 2:
        return _gathered_exact(queries, base, ids, batch_size)
    if not (isinstance(base, np.ndarray) and base.dtype == np.float32
            and base.flags.c_contiguous and base.ndim == 2 and ids.ndim == 2):
        return gathered_scores(queries, base, ids, batch_size)
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss is a dependency
        return gathered_scores(queries, base, ids, batch_size)
    out = np.full(ids.shape, -np.inf, dtype=np.float32)
    (_, k), d = ids.shape, base.shape[1]
    if ids.size == 0 or len(base) == 0:  # no id to score (all -1 when base is empty)
        return out
    for start in range(0, len(ids), batch_size):
        blk = ids[start : start + batch_size]
        q = as_float32(queries[start : start + batch_size])
        safe = np.ascontiguousarray(np.where(blk < 0, 0, blk), dtype=np.int64)
        got = np.empty(blk.shape, dtype=np.float32)
        faiss.fvec_inner_products_by_idx(faiss.swig_ptr(got), faiss.swig_ptr(q),
                                         faiss.swig_ptr(base), faiss.swig_ptr(safe),
                                         d, len(blk), k)
        out[start : start + len(blk)] = np.where(blk < 0, -np.inf, got)
    return out


def _gathered_exact(queries: np.ndarray, base: Any, ids: np.ndarray,
                    batch_size: int) -> np.ndarray:
    """:func:`exact_scores` against rows read on demand (a
    :class:`~pairkit.core.shard_rows.ShardRows`): each batch's distinct rows gathered as
    float32, then scored by the same FAISS kernel as an array in memory (same scores)."""
    out = np.full(ids.shape, -np.inf, dtype=np.float32)
    for start in range(0, len(ids), batch_size):
        blk = ids[start : start + batch_size]
        ok = blk >= 0
        if not ok.any():
            continue
        rows, local = np.unique(blk[ok], return_inverse=True)
        sub = np.ascontiguousarray(base[rows], dtype=np.float32)
        where = np.full(blk.shape, -1, dtype=np.int64)
        where[ok] = local.ravel()
        out[start : start + len(blk)] = exact_scores(queries[start : start + batch_size],
                                                     sub, where, batch_size)
    return out


def gathered_scores(queries: np.ndarray, base: np.ndarray, ids: np.ndarray,
                    batch_size: int = 1024) -> np.ndarray:
    """:func:`exact_scores` by gathering ``base[ids]`` (any dtype, any array-like base)."""
    out = np.full(ids.shape, -np.inf, dtype=np.float32)
    for start in range(0, len(ids), batch_size):
        blk = ids[start : start + batch_size]
        q = as_float32(queries[start : start + batch_size])
        safe = np.where(blk < 0, 0, blk)
        vec = np.asarray(base[safe.ravel()], dtype=np.float32).reshape(*blk.shape, -1)
        s = np.einsum("nkd,nd->nk", vec, q, dtype=np.float32)
        out[start : start + len(blk)] = np.where(blk < 0, -np.inf, s)
    return out


class IvfListMajor:
    """Batch search of an ``IndexIVFFlat`` list by list (BLAS instead of per-query scans).

    FAISS scans an IVF index query by query; with many queries (mining searches
    every row) it is faster to gather, for each inverted list, the queries that
    probe it and score them against the list with one matrix product, merging
    into a k-heap per query (the method of faiss ``contrib/big_batch_search.py``).
    Results equal ``index.search`` with the same ``nprobe`` (up to float rounding).
    Exposes ``ntotal`` and ``search(x, k)`` so :func:`knn_search` can use it.
    """

    def __init__(self, index: Any) -> None:
        import faiss

        self._owner = index  # the view below does not keep the index alive
        self.ivf = faiss.extract_index_ivf(index)
        self.ntotal = int(index.ntotal)
        self.d = int(self.ivf.d)
        self._lists: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (shipped to a Ray worker) as its index (FAISS indexes pickle as their
        serialised bytes, once however many objects hold them); the IVF view and the list
        cache are made again there."""
        return {"owner": self._owner, "ntotal": self.ntotal, "d": self.d}

    def __setstate__(self, state: dict[str, Any]) -> None:
        import faiss

        self._owner = state["owner"]
        self.ivf = faiss.extract_index_ivf(self._owner)
        self.ntotal, self.d = state["ntotal"], state["d"]
        self._lists = {}

    @staticmethod
    def supports(index: Any) -> bool:
        """True for a CPU IndexIVFFlat (raw float32 codes) with inner product."""
        import faiss

        if is_gpu_index(index):
            return False
        try:
            ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
        except Exception:
            return False
        return (type(ivf) is faiss.IndexIVFFlat
                and ivf.metric_type == faiss.METRIC_INNER_PRODUCT)

    @staticmethod
    def worthwhile(index: Any) -> bool:
        """True when the lists are long enough (>= 256 rows on average) for per-list
        matrix products to beat FAISS's per-query scan (measured: 2-3x faster at
        N = 100,000-200,000 with nlist ~ sqrt(N), 2x slower at N = 20,000)."""
        import faiss

        if not IvfListMajor.supports(index):
            return False
        return int(index.ntotal) >= 256 * int(faiss.extract_index_ivf(index).nlist)

    def inverted_list(self, lid: int) -> tuple[np.ndarray, np.ndarray]:
        """List ``lid``'s vectors (n, d) float32 and ids (n,) int64: read-only views of the
        index's own lists (no copy: a copy of every list probed doubled the index's memory,
        0.5 GB a million rows at 128 dims), valid while this object (which keeps the index)
        lives and the index is not added to."""
        import faiss

        if lid not in self._lists:
            inv = self.ivf.invlists
            n = int(inv.list_size(lid))
            if n == 0:
                vec, ids = np.zeros((0, self.d), np.float32), np.zeros(0, np.int64)
            else:
                codes = faiss.rev_swig_ptr(inv.get_codes(lid), n * self.d * 4)
                vec = np.frombuffer(codes, dtype=np.float32).reshape(n, self.d)
                ids = np.asarray(faiss.rev_swig_ptr(inv.get_ids(lid), n), dtype=np.int64)
                vec.flags.writeable = False
                ids.flags.writeable = False
            self._lists[lid] = (vec, ids)
        return self._lists[lid]

    def cell_ids(self, lid: int) -> np.ndarray:
        """List ``lid``'s ids (n,) int64 (a read-only view)."""
        return self.inverted_list(lid)[1]

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(D, I)`` (nq, k) like ``index.search``: best first, -1/-inf padded."""
        return list_major_search(self.ivf.quantizer, int(self.ivf.nprobe), self.inverted_list,
                                 x, k)


def list_major_search(quantizer: Any, nprobe: int, inverted_list: Any, x: np.ndarray,
                      k: int) -> tuple[np.ndarray, np.ndarray]:
    """The list-major search of :class:`IvfListMajor` over any inverted lists:
    ``quantizer`` (a FAISS index of the cells' centroids) picks each query's ``nprobe``
    cells, ``inverted_list(cell)`` gives a cell's rows ``(vectors (n, d) float32 C-contiguous,
    ids (n,) int64)``; each cell's queries are scored against its rows by one matrix
    product and merged into a k-heap per query. ``(D, I)`` (nq, k), best first,
    -1/-inf padded."""
    import faiss

    x = as_float32(x)
    nq = len(x)
    _, assign = quantizer.search(x, nprobe)
    flat = assign.ravel()
    qids = np.repeat(np.arange(nq, dtype=np.int64), nprobe)
    keep = flat >= 0
    flat, qids = flat[keep], qids[keep]
    order = np.argsort(flat, kind="stable")
    flat, qids = flat[order], qids[order]
    bounds = np.flatnonzero(np.diff(flat)) + 1
    heap = faiss.ResultHeap(nq, k, keep_max=True)
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(flat)], strict=True):
        if hi <= lo:
            continue
        vec, ids = inverted_list(int(flat[lo]))
        if len(ids) == 0:
            continue
        sub = qids[lo:hi]
        heap.add_result_subset(sub, x[sub] @ vec.T, ids)
    heap.finalize()
    return np.where(heap.I >= 0, heap.D, -np.inf).astype(np.float32), heap.I
