"""Range search: every pair of rows with similarity >= a threshold, streamed.

Queries are searched in blocks; each block's result is handed out before the
next block is searched, so memory is the index plus one block's result pairs
(never N x N). A block's pairs are handed out in pieces of about :data:`MAX_PAIRS`
(cut between query rows), and a block holds fewer queries than ``batch_size``, down to
:data:`MIN_QUERIES`, where the previous one found more than :data:`MAX_PAIRS` pairs (the
first block: as many queries as give :data:`MAX_PAIRS` pairs at most, at least
:data:`MIN_QUERIES`): so a big group of identical rows costs one block's FAISS result
(12 bytes a pair) of about ``max(MAX_PAIRS, MIN_QUERIES x group size)`` pairs, and the
caller's work on its pairs a piece at a time. Scores are inner products; on
L2-normalised rows that is cosine.

Two methods give the same pairs (within float tolerance):

- ``range``: FAISS ``range_search`` on a flat CPU index. FAISS keeps inner
  products strictly *greater* than the radius, so the radius is the float32
  number just below the threshold: a score equal to the threshold is kept.
- ``knn``: a kNN search with ``k`` neighbours per query (the GPU path, since
  FAISS GPU indices have no range search and cap k at 2048); a query whose
  k-th neighbour still reaches the threshold may have more, and is searched
  again exactly with the CPU range search. So the result never loses a pair.

With the torch backend (``backend="torch"``, or ``auto`` when FAISS sees no GPU and
torch does) the pairs come from :meth:`pairkit.index.torch_search.TorchFlatIndex.
range_blocks`: a low-precision GEMM with the threshold lowered by its rounding bound,
every candidate pair re-checked in float32 (same pairs, within float tolerance).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pairkit.errors import PairkitError
from pairkit.index.search import as_float32

# FAISS GPU indices answer at most k = 2048 neighbours per query.
GPU_MAX_K = 2048
# pairs per piece handed out, and per block searched (about: see the module docstring)
MAX_PAIRS = 1 << 22
# queries a block holds at least (or batch_size): FAISS's flat range search took 4-9x the
# CPU time per query in calls of 419 or 512 queries as in calls of 1,024 or 4,096
# (50,000 x 128 rows, one thread)
MIN_QUERIES = 1024
METHODS = ("auto", "range", "knn")


def float32_radius(threshold: float) -> float:
    """The FAISS inner-product radius that keeps scores >= ``threshold`` (float32)."""
    t = np.float32(threshold)
    return float(np.nextafter(t, np.float32(-np.inf)))


def range_block(
    index: Any, block: np.ndarray, radius: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FAISS ``range_search`` of the query ``block`` in the flat ``index`` at ``radius``
    (:func:`float32_radius`): ``(rows of block, index ids, scores)``, int64, int64,
    float32, sorted by row."""
    lims, scores, ids = index.range_search(as_float32(block), radius)
    counts = np.diff(lims).astype(np.int64)
    rows = np.repeat(np.arange(len(block), dtype=np.int64), counts)
    return rows, ids.astype(np.int64), scores.astype(np.float32)


def row_spans(lims: np.ndarray, max_pairs: int) -> list[tuple[int, int]]:
    """Query rows ``[(r0, r1), ...]`` covering ``len(lims) - 1`` rows whose pairs are
    ``lims[r]:lims[r + 1]``, each span holding at most ``max_pairs`` pairs plus one row's."""
    n_rows = len(lims) - 1
    targets = np.arange(max_pairs, int(lims[-1]), max_pairs)
    cuts = np.searchsorted(lims, targets, side="right") - 1
    bounds = np.unique(np.concatenate([[0], cuts, [n_rows]]))
    return [(int(r0), int(r1)) for r0, r1 in zip(bounds[:-1], bounds[1:], strict=True)]


def pieces(lims: np.ndarray, ids: np.ndarray, scores: np.ndarray, start: int,
           max_pairs: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A block's pairs (query ``r``'s at ``lims[r]:lims[r + 1]`` of ``ids`` and
    ``scores``) as ``(start + r, ids, scores)`` pieces of :func:`row_spans`."""
    for r0, r1 in row_spans(lims, max_pairs):
        lo, hi = int(lims[r0]), int(lims[r1])
        counts = np.diff(lims[r0 : r1 + 1]).astype(np.int64)
        rows = np.repeat(np.arange(start + r0, start + r1, dtype=np.int64), counts)
        yield rows, ids[lo:hi].astype(np.int64, copy=False), \
            scores[lo:hi].astype(np.float32, copy=False)


def range_search_blocks(
    queries: np.ndarray,
    base: np.ndarray,
    threshold: float,
    *,
    batch_size: int = 4096,
    method: str = "auto",
    device: str = "cpu",
    k: int = 256,
    backend: str = "faiss",
    max_pairs: int | None = None,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield the pairs with ``queries[i] . base[j] >= threshold``, one piece at a time.

    Each yield is ``(query_ids, base_ids, scores)``: int64, int64, float32 arrays of
    equal length m (query ids are global row numbers of ``queries``), sorted by
    query id; within a query, order is unspecified. A block of at most ``batch_size``
    queries is yielded in pieces of at most ``max_pairs`` pairs plus one query's
    (None: :data:`MAX_PAIRS`); the next block's queries are cut to what gave about
    ``max_pairs`` pairs in the last one, down to :data:`MIN_QUERIES` (module
    docstring). ``method``: ``range`` (CPU FAISS range search), ``knn`` (kNN with ``k``
    per query plus an exact re-search of saturated queries), or ``auto`` (``knn`` on
    GPU, ``range`` on CPU).
    ``device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``; ``backend``: ``faiss``,
    ``torch`` or ``auto`` (:func:`pairkit.index.backend.resolve_backend`; ``method`` is
    FAISS's and does not apply to torch).
    ``on_start(len(queries))`` is called once before the search and ``progress(m)``
    after each block's pairs are handed out (``m``: its queries; they add up to
    ``len(queries)``): the progress hook of ``pairkit dedup``.
    """
    if method not in METHODS:
        raise PairkitError(f"method must be one of {', '.join(METHODS)}, got {method}")
    if batch_size < 1:
        raise PairkitError(f"batch_size must be >= 1, got {batch_size}")
    if k < 1:
        raise PairkitError(f"k must be >= 1, got {k}")
    base = as_float32(base)
    queries = np.asarray(queries)
    if queries.ndim != 2 or base.ndim != 2 or queries.shape[1] != base.shape[1]:
        raise PairkitError(
            f"queries and base must be 2-d with the same width, got {queries.shape} "
            f"and {base.shape}"
        )
    if on_start is not None:
        on_start(len(queries))
    if len(queries) == 0 or len(base) == 0:
        if progress is not None and len(queries):
            progress(len(queries))
        return
    from pairkit.index.backend import resolve_backend
    from pairkit.index.open import exact_searcher

    where = resolve_backend(backend, device)
    if where.name == "torch":
        yield from exact_searcher(base, where).index.range_blocks(queries, threshold,
                                                                  batch_size, progress)
        return
    use_gpu = where.gpu
    if method == "auto":
        method = "knn" if use_gpu else "range"
    if method == "range" and use_gpu:
        raise PairkitError("FAISS has no range search on GPU: use method knn or device cpu")

    radius = float32_radius(threshold)
    t32 = np.float32(threshold)
    opened = exact_searcher(base, where)  # on the GPUs of ``where``, with a CPU copy
    cpu_index = opened.cpu_index
    knn_index = opened.index
    kk = min(k, len(base), GPU_MAX_K if use_gpu else len(base))

    cap = MAX_PAIRS if max_pairs is None else max(1, int(max_pairs))
    floor = min(batch_size, MIN_QUERIES)
    step = max(floor, min(batch_size, cap // len(base)))  # <= cap pairs, or floor queries
    start = 0
    while start < len(queries):
        block = as_float32(queries[start : start + step])
        if method == "range":
            lims, scores, ids = cpu_index.range_search(block, radius)
        else:
            rows, ids, scores = _knn_block(knn_index, cpu_index, block, kk, t32, radius)
            lims = np.searchsorted(rows, np.arange(len(block) + 1))
            del rows
        yield from pieces(lims, ids, scores, start, cap)
        if progress is not None:
            progress(len(block))
        start += len(block)
        per_query = int(lims[-1]) / len(block)
        step = max(floor, min(batch_size, int(cap / per_query) if per_query else batch_size))
        del lims, ids, scores  # before the next block's search


def _knn_block(
    knn_index: Any,
    cpu_index: Any,
    block: np.ndarray,
    k: int,
    t32: np.float32,
    radius: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kNN with k per query; queries with k hits >= threshold are re-searched exactly."""
    d, i = knn_index.search(block, k)
    keep = (d >= t32) & (i >= 0)
    saturated = keep[:, -1].copy() if k < cpu_index.ntotal else np.zeros(len(block), bool)
    keep[saturated] = False
    rows = np.nonzero(keep)[0].astype(np.int64)
    ids = i[keep].astype(np.int64)
    scores = d[keep].astype(np.float32)
    if saturated.any():
        sat_rows = np.nonzero(saturated)[0]
        r2, i2, s2 = range_block(cpu_index, block[sat_rows], radius)
        rows = np.concatenate([rows, sat_rows[r2].astype(np.int64)])
        ids = np.concatenate([ids, i2])
        scores = np.concatenate([scores, s2])
        order = np.argsort(rows, kind="stable")
        rows, ids, scores = rows[order], ids[order], scores[order]
    return rows, ids, scores


def self_pairs_blocks(
    vectors: np.ndarray,
    threshold: float,
    **kwargs: Any,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield each unordered pair ``i < j`` of ``vectors`` with score >= threshold once.

    Same blocks and keyword arguments as :func:`range_search_blocks`; yields
    ``(i, j, scores)`` with ``i < j`` (int64, int64, float32).
    """
    for rows, ids, scores in range_search_blocks(vectors, vectors, threshold, **kwargs):
        upper = ids > rows
        yield rows[upper], ids[upper], scores[upper]


def range_search(
    queries: np.ndarray, base: np.ndarray, threshold: float, **kwargs: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs of :func:`range_search_blocks` concatenated: ``(query_ids, base_ids, scores)``.

    Memory is proportional to the number of pairs returned.
    """
    parts = list(range_search_blocks(queries, base, threshold, **kwargs))
    if not parts:
        return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]
