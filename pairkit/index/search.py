"""The one kNN search that every command uses.

Scores are inner products; on L2-normalised rows that is cosine similarity.
Queries are searched in blocks, so memory is O(batch_size x k) for results
plus the index itself: never N x N.
"""

from __future__ import annotations

from typing import Any

import numpy as np


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


def knn_search(
    queries: np.ndarray,
    index: Any,
    k: int,
    *,
    batch_size: int = 8192,
) -> tuple[np.ndarray, np.ndarray]:
    """Search ``queries`` (nq, d) against a FAISS ``index`` (or an (N, d) array).

    Returns ``(scores, ids)`` of shape (nq, k): float32 similarities, best first,
    and int64 row ids; where the index holds fewer than k rows the tail is
    padded with id -1 and score -inf.
    """
    if isinstance(index, np.ndarray):
        index = flat_index(index)
    nq = len(queries)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or k == 0:
        return scores, ids
    for start in range(0, nq, batch_size):
        block = as_float32(queries[start : start + batch_size])
        d, i = index.search(block, k)
        valid = i >= 0
        d = np.where(valid, d, -np.inf)
        scores[start : start + len(block)] = d
        ids[start : start + len(block)] = i
    return scores, ids
