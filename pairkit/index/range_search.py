"""Range search: every pair of rows with similarity >= a threshold, streamed.

Queries are searched in blocks; each block's result is handed out before the
next block is searched, so memory is the index plus one block's result pairs
(never N x N). Scores are inner products; on L2-normalised rows that is cosine.

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

from collections.abc import Iterator
from typing import Any

import numpy as np

from pairkit.errors import PairkitError
from pairkit.index.search import as_float32

# FAISS GPU indices answer at most k = 2048 neighbours per query.
GPU_MAX_K = 2048
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
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield the pairs with ``queries[i] . base[j] >= threshold``, one query block at a time.

    Each yield is ``(query_ids, base_ids, scores)``: int64, int64, float32 arrays of
    equal length m (query ids are global row numbers of ``queries``), sorted by
    query id; within a query, order is unspecified. ``method``: ``range`` (CPU
    FAISS range search), ``knn`` (kNN with ``k`` per query plus an exact re-search
    of saturated queries), or ``auto`` (``knn`` on GPU, ``range`` on CPU).
    ``device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``; ``backend``: ``faiss``,
    ``torch`` or ``auto`` (:func:`pairkit.index.backend.resolve_backend`; ``method`` is
    FAISS's and does not apply to torch).
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
    if len(queries) == 0 or len(base) == 0:
        return
    from pairkit.index.backend import resolve_backend
    from pairkit.index.open import exact_searcher

    where = resolve_backend(backend, device)
    if where.name == "torch":
        yield from exact_searcher(base, where).index.range_blocks(queries, threshold,
                                                                  batch_size)
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

    for start in range(0, len(queries), batch_size):
        block = as_float32(queries[start : start + batch_size])
        if method == "range":
            rows, ids, scores = range_block(cpu_index, block, radius)
        else:
            rows, ids, scores = _knn_block(knn_index, cpu_index, block, kk, t32, radius)
        yield rows + start, ids, scores


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
