"""Neighbours of queries among references, with excluded rows removed.

A query never counts itself, and (by default) never counts another view of its
own source: those are the trivial matches. To still return ``k`` neighbours
after removing them, the search fetches ``k + e`` rows where ``e`` bounds the
number of excluded rows of *that* query (its source group among the references,
plus one for the query itself; rounded up to a power of two, so that a block's
queries share few distinct depths), not of the query with the largest source.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairkit.index.search import kept_first, knn_search, rounded_depths, row_chunks

# the compaction's temporaries per fetched neighbour (masks, the int64 order, the copies)
COMPACT_BYTES = 48


@dataclass(frozen=True)
class Exclusion:
    """Which reference rows each query must not see.

    ``self_rows`` (nq,): the query's own row among the references, -1 if it is not
    one. ``query_groups`` (nq,) and ``ref_groups`` (n_ref,): source codes in one
    code space; a reference whose code equals the query's is excluded (codes < 0
    never match). Either part may be None.
    """

    self_rows: np.ndarray | None = None
    query_groups: np.ndarray | None = None
    ref_groups: np.ndarray | None = None

    def max_excluded(self) -> int:
        """Upper bound on the rows excluded for any one query."""
        extra = 0
        if self.query_groups is not None and self.ref_groups is not None:
            ref = self.ref_groups[self.ref_groups >= 0]
            if len(ref):
                counts = np.bincount(ref)
                q = self.query_groups[(self.query_groups >= 0) & (self.query_groups < len(counts))]
                if len(q):
                    extra = int(counts[q].max())
        if self.self_rows is not None and bool((self.self_rows >= 0).any()):
            extra += 1
        return extra

    def excluded_per_query(self, nq: int) -> np.ndarray:
        """(nq,) int64: an upper bound on the rows excluded for each query (its source's
        references, plus one where any query is a reference itself, as
        :meth:`max_excluded`, whose value is their largest)."""
        extra = np.zeros(nq, dtype=np.int64)
        if self.query_groups is not None and self.ref_groups is not None:
            ref = self.ref_groups[self.ref_groups >= 0]
            if len(ref):
                counts = np.bincount(ref)
                q = np.asarray(self.query_groups)
                ok = (q >= 0) & (q < len(counts))
                extra[ok] = counts[q[ok]]
        if self.self_rows is not None and bool((self.self_rows >= 0).any()):
            extra += 1
        return extra


def search_excluding(
    queries: np.ndarray,
    index: Any,
    n_ref: int,
    k: int,
    exclusion: Exclusion | None = None,
    *,
    block_rows: int = 4096,
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Yield ``(start, scores, ids)`` per block of queries, best first.

    ``scores`` float32 (b, k) and ``ids`` int64 (b, k) hold the ``k`` nearest
    references that are not excluded; where fewer remain the tail is id -1,
    score -inf (views of the block's search result when excluded rows were fetched).
    Memory is the block's result, O(block_rows x (k + excluded)), plus
    :data:`~pairkit.index.search.ROW_CHUNK_BYTES` of temporaries.
    """
    exclusion = exclusion or Exclusion()
    extra = exclusion.excluded_per_query(len(queries))
    fetch = np.minimum(n_ref, k + rounded_depths(extra))  # each query's own depth
    skipped = skips_own_group(index, exclusion, extra)
    if skipped is not None:
        fetch[skipped] = SKIPPED  # a big source skipped by the exact search, not fetched
    width = min(k, n_ref)
    for start in range(0, len(queries), block_rows):
        stop = min(start + block_rows, len(queries))
        depths = np.unique(fetch[start:stop])
        if len(depths) == 1 and depths[0] != SKIPPED:  # one depth: compacted in place
            scores, ids = fetched_kept(queries[start:stop], index, int(depths[0]), k,
                                       exclusion, start, stop, block_rows)
        else:
            scores = np.full((stop - start, width), -np.inf, dtype=np.float32)
            ids = np.full((stop - start, width), -1, dtype=np.int64)
            for depth in depths:  # the block's queries of one depth searched together
                sel = np.flatnonzero(fetch[start:stop] == depth)
                if depth == SKIPPED:
                    scores[sel], ids[sel] = outside_kept(queries[start:stop][sel], index,
                                                         n_ref, k, exclusion, start + sel)
                    continue
                scores[sel], ids[sel] = fetched_kept(
                    queries[start:stop][sel], index, int(depth), k,
                    exclusion, start + sel, None, block_rows)
        if width < k:
            pad = k - width
            scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
            ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        yield start, scores, ids
        del scores, ids  # not held while the next block is searched


SKIPPED = -1  # the depth of a query whose excluded source the exact search skips


def skips_own_group(index: Any, exclusion: Exclusion, extra: np.ndarray
                    ) -> np.ndarray | None:
    """(nq,) bool: the queries whose own source has more than ``OVER_FETCH_ROWS`` (1,024)
    references, which an exact search of ``index`` (a FAISS flat inner-product index on
    the CPU, whose rows are read in place) skips rather than fetching and dropping them
    (:func:`pairkit.index.outside.search_outside_parts`: a query of a 10,000-view source
    otherwise fetched k + 16,384 rows); None where there is none or the index can't."""
    from pairkit.index.outside import OVER_FETCH_ROWS

    if exclusion.query_groups is None or exclusion.ref_groups is None:
        return None
    big = (extra > OVER_FETCH_ROWS) & (np.asarray(exclusion.query_groups) >= 0)
    if not big.any() or flat_array(index) is None:
        return None
    return big


def flat_array(index: Any) -> np.ndarray | None:
    """The (N, d) float32 rows of a CPU ``IndexFlatIP`` (read in place), else None."""
    try:
        import faiss

        flat = faiss.downcast_index(index)
    except Exception:  # noqa: BLE001 - not a FAISS index (torch, a GPU index, an array)
        return None
    if not isinstance(flat, faiss.IndexFlatIP):
        return None
    from pairkit.index.open import flat_rows

    return flat_rows(flat)


def outside_kept(queries: np.ndarray, index: Any, n_ref: int, k: int, exclusion: Exclusion,
                 at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fetched_kept` for queries (rows ``at`` of ``exclusion``) whose source's rows
    the exact search skips: searched among the references of other sources
    (:func:`pairkit.index.outside.search_outside_parts`), one deeper for the query's own
    row when it is a reference outside its source; ``(scores, ids)`` (nq, min(k, n_ref))."""
    from pairkit.index.outside import search_outside_parts

    width = min(k, n_ref)
    own = np.asarray(exclusion.query_groups)[at]
    s, i = search_outside_parts(flat_array(index), np.asarray(exclusion.ref_groups),  # type: ignore[arg-type]
                                queries, own, min(n_ref, k + 1),
                                lambda q, kk: knn_search(q, index, kk))
    keep = i >= 0
    if exclusion.self_rows is not None:
        keep &= i != exclusion.self_rows[at][:, None]
    s, i = kept_first(s, i, keep, k)
    return s[:, :width], i[:, :width]


def fetched_kept(queries: np.ndarray, index: Any, k_fetch: int, k: int,
                 exclusion: Exclusion, start: Any, stop: int | None, block_rows: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The first ``min(k, k_fetch)`` kept neighbours (best first, -inf / -1 padded) of
    ``queries``, searched ``k_fetch`` deep, their rows of ``exclusion`` left out: the
    queries are its rows ``start:stop`` (``stop`` None: ``start`` is their positions)."""
    at = slice(start, stop) if stop is not None else start
    width = min(k, k_fetch)
    scores, ids = knn_search(queries, index, k_fetch, batch_size=block_rows)
    # Stable compaction, in place and some rows at a time (each row on its own): kept
    # rows first, in their original (best-first) order.
    for rows in row_chunks(len(ids), k_fetch * COMPACT_BYTES):
        keep = ids[rows] >= 0
        if exclusion.self_rows is not None:
            keep &= ids[rows] != exclusion.self_rows[at, None][rows]
        if exclusion.query_groups is not None and exclusion.ref_groups is not None:
            qg = exclusion.query_groups[at, None][rows]
            rg = exclusion.ref_groups[np.maximum(ids[rows], 0)]
            keep &= ~((rg == qg) & (qg >= 0))
        scores[rows, :width], ids[rows, :width] = kept_first(scores[rows], ids[rows],
                                                             keep, k)
    return scores[:, :width], ids[:, :width]
