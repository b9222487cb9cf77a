"""The near-duplicate rule's big groups, skipped by the search rather than fetched and
flagged.

With the ``near-duplicate`` rule on (store-wide groups) and flagged candidates
eliminated, every row in the near-duplicate group of the anchor or of one of its
positives is flagged and dropped. A big group (a placeholder image or an identical
embedding repeated thousands of times) otherwise sends each anchor near it ever deeper
(4x the k per retry) past the group's rows for its first unflagged candidate: 10,000
identical rows of a 50,000-row store kept ``mine`` busy for more than 900 s. An exact
search (:meth:`pairkit.index.open.Searcher.search_outside`) leaves those rows out instead,
so the table is the same as fetching and dropping them. Only groups of at least
:data:`MIN_SKIPPED_GROUP` rows are skipped: smaller ones cost a few extra candidates, and
are fetched and flagged as before, so that the anchors of a block share few distinct sets
of skipped rows (one search each).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.core.unique import unique_rows

# groups of at least this many rows are skipped by the search (smaller ones are fetched
# and flagged): the size up to which an exclusion is fetched rather than copied around
# (pairkit.index.outside.OVER_FETCH_ROWS)
MIN_SKIPPED_GROUP = 1024


def big_groups(groups: np.ndarray, min_rows: int | None = None) -> np.ndarray | None:
    """(N,) int32: each row's code among the near-duplicate ``groups`` ((N,), -1 none) of
    at least ``min_rows`` rows (default :data:`MIN_SKIPPED_GROUP`), numbered 0, 1, ...;
    -1 for every other row. None when no group is that big."""
    least = MIN_SKIPPED_GROUP if min_rows is None else int(min_rows)
    g = np.asarray(groups, dtype=np.int64)
    inside = g >= 0
    if not inside.any():
        return None
    values, inverse, counts = np.unique(g[inside], return_inverse=True, return_counts=True)
    big = counts >= least
    if not big.any():
        return None
    code_of = np.full(len(values), -1, dtype=np.int32)
    code_of[big] = np.arange(int(big.sum()), dtype=np.int32)
    out = np.full(len(g), -1, dtype=np.int32)
    out[inside] = code_of[np.asarray(inverse).ravel()]
    return out


def skipped_groups(codes: np.ndarray, anchors: np.ndarray, positives: np.ndarray
                   ) -> np.ndarray:
    """(n, m) int64: the big-group ``codes`` (:func:`big_groups`) of each anchor and of its
    ``positives`` (n, p), -1 padded, each once, ascending after the padding (so that
    anchors skipping the same groups have equal rows); m >= 1."""
    anchors = np.asarray(anchors, dtype=np.int64)
    rows = np.concatenate([anchors[:, None], np.asarray(positives, dtype=np.int64)], axis=1)
    c = np.where(rows >= 0, codes[np.maximum(rows, 0)], -1).astype(np.int64)
    c.sort(axis=1)
    repeat = np.zeros(c.shape, dtype=bool)
    repeat[:, 1:] = c[:, 1:] == c[:, :-1]
    c[repeat] = -1
    c.sort(axis=1)
    width = max(1, int((c >= 0).sum(axis=1).max(initial=0)))
    return c[:, c.shape[1] - width:]


def search_skipping(searcher: Any, queries: np.ndarray, k: int, codes: np.ndarray,
                    skipped: np.ndarray, own: np.ndarray | None = None,
                    parts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, ids)`` (nq, k) of ``queries`` among the rows outside the big groups each
    query's row of ``skipped`` (nq, m) names (:func:`skipped_groups` over ``codes``) and,
    with ``own`` (nq,) and ``parts`` (N,), outside the query's part (the label relation's
    class): best first, ties by id, -inf / -1 padded where fewer rows are left.

    ``searcher(queries, k)`` searches every row and ``searcher.outside(queries, k, own,
    parts)`` skips rows exactly (:meth:`pairkit.index.open.Searcher.search_outside`).
    Queries that skip no group are searched as without this (``searcher.outside`` with
    ``own`` and ``parts``, else ``searcher``); the others once per distinct set of
    skipped rows (their part and groups), as the rows of one part of a 0/1 partition."""
    nq = len(queries)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or k == 0:
        return scores, ids
    plain = (skipped < 0).all(axis=1)
    if plain.any():
        sel = np.flatnonzero(plain)
        if parts is None or own is None:
            scores[sel], ids[sel] = searcher(queries[sel], k)
        else:
            scores[sel], ids[sel] = searcher.outside(queries[sel], k, own[sel], parts)
    rest = np.flatnonzero(~plain)
    if not len(rest):
        return scores, ids
    key = skipped[rest] if own is None else np.column_stack([own[rest], skipped[rest]])
    sets, _, which = unique_rows(key)
    for g, row in enumerate(sets):
        sel = rest[which == g]
        groups = row if own is None else row[1:]
        kept = ~np.isin(codes, groups[groups >= 0])
        if own is not None and parts is not None:
            kept &= np.asarray(parts) != row[0]
        # the skipped rows are part 0 of a 0/1 partition, every query's own
        scores[sel], ids[sel] = searcher.outside(queries[sel], k, np.zeros(len(sel), np.int64),
                                                 kept.astype(np.int64))
    return scores, ids
