"""The one kNN search that every command uses.

Scores are inner products; on L2-normalised rows that is cosine similarity.
Queries are searched in blocks, so memory is O(batch_size x k) for results
plus the index itself (FAISS's exact search itself tiles the base): never N x N.

Results are ordered by score, best first, ties by ascending id, so an exact
search returns the same ids as a brute-force stable sort.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# FAISS GPU indices answer at most k = 2048 neighbours per query (GPU k-selection limit).
GPU_MAX_K = 2048


def as_float32(x: np.ndarray) -> np.ndarray:
    """C-contiguous float32 view or copy of ``x`` (what FAISS needs)."""
    return np.ascontiguousarray(x, dtype=np.float32)


def flat_index(base: np.ndarray) -> Any:
    """An exact inner-product FAISS index holding ``base`` (N, d)."""
    import faiss

    base = as_float32(base)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(base)
    return index


def is_gpu_index(index: Any) -> bool:
    """True for FAISS GPU indices (and shards of them), whose search caps k at 2048."""
    name = type(index).__name__
    return name.startswith("Gpu") or name.startswith("IndexShards") or (
        name.startswith("IndexReplicas")
    )


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


def knn_search(
    queries: np.ndarray,
    index: Any,
    k: int,
    *,
    batch_size: int = 8192,
    cpu_fallback: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Search ``queries`` (nq, d) against a FAISS ``index`` (or an (N, d) array).

    Returns ``(scores, ids)`` of shape (nq, k): float32 similarities, best first
    (ties by ascending id), and int64 row ids; where the index holds fewer than
    k rows (or an approximate index finds fewer) the tail is padded with id -1
    and score -inf.

    On a GPU index, k > 2048 is searched on ``cpu_fallback`` (a CPU index with the
    same rows) or on a CPU copy of the index, never passed to the GPU.
    """
    if isinstance(index, np.ndarray):
        index = flat_index(index)
    nq = len(queries)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or k == 0:
        return scores, ids
    if k > GPU_MAX_K and is_gpu_index(index):
        index = cpu_fallback if cpu_fallback is not None else cpu_copy(index)
    ntotal = int(index.ntotal)
    kk = min(k, ntotal)  # FAISS pads itself, but asking for fewer saves heap work
    if kk == 0:
        return scores, ids
    for start in range(0, nq, batch_size):
        block = as_float32(queries[start : start + batch_size])
        d, i = index.search(block, kk)
        d = np.where(i >= 0, d, -np.inf).astype(np.float32)
        d, i = sort_results(d, i)
        scores[start : start + len(block), :kk] = d
        ids[start : start + len(block), :kk] = i
    return scores, ids


def exact_scores(queries: np.ndarray, base: np.ndarray, ids: np.ndarray,
                 batch_size: int = 1024) -> np.ndarray:
    """Exact inner products of ``queries[i]`` with ``base[ids[i, j]]``: float32 (nq, k).

    ``-inf`` where ``ids`` is -1. Used to re-score candidates of a lossy index.
    Memory: O(batch_size x k x d).
    """
    out = np.full(ids.shape, -np.inf, dtype=np.float32)
    for start in range(0, len(ids), batch_size):
        blk = ids[start : start + batch_size]
        q = as_float32(queries[start : start + batch_size])
        safe = np.where(blk < 0, 0, blk)
        vec = np.asarray(base[safe.ravel()], dtype=np.float32).reshape(*blk.shape, -1)
        s = np.einsum("nkd,nd->nk", vec, q, dtype=np.float32)
        out[start : start + len(blk)] = np.where(blk < 0, -np.inf, s)
    return out
