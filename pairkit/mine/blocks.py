"""Blocks of anchors: fetch candidates, select, search again when short, and merge.

A run's anchors are cut into spans of ``--batch-size``; :func:`mine_block` mines one span
into a :class:`MineResult` relative to the span's start, and :func:`merge_block` writes it
into the run's result. Where the blocks run (here, or on a Ray cluster) is the caller's
``map_blocks``; the result is the same either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairkit.core.pairs import MinedPairs
from pairkit.core.store_rows import StoreRows
from pairkit.index.search import row_dots
from pairkit.mine.config import MineConfig
from pairkit.mine.easy_left import draw_for_unmet
from pairkit.mine.group_skip import search_skipping, skipped_groups
from pairkit.mine.selection import (
    CANDIDATE_CODES,
    CODE,
    FewOutside,
    Selection,
    SelectionContext,
    drop_repeats,
    easy_candidates,
    enumerated_candidates,
    padded_rows,
    select_negatives,
)

Searcher = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
# attracted rows of one block: (anchor rows, item ids, scores, reasons)
Attracted = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class MineResult:
    """Mined pairs plus the counts behind the summary (see
    :func:`pairkit.mine.stats.summary_stats`)."""

    pairs: MinedPairs
    removed: dict[str, int]
    fn_flagged: dict[str, int]
    retries: int = 0
    anchors_retried: int = 0
    k_initial: int = 0
    k_max: int = 0


def empty_result(anchors: np.ndarray, positives: np.ndarray, pos_scores: np.ndarray,
                 num_negatives: int, keep_flags: bool, k0: int) -> MineResult:
    """A :class:`MineResult` for ``anchors`` with no negatives yet (ids -1, scores NaN,
    ranks -1; flag arrays when ``keep_flags``), zero counts and ``k0`` as first k."""
    n, K = len(anchors), num_negatives
    result = MineResult(
        pairs=MinedPairs(anchors, positives, pos_scores,
                         np.full((n, K), -1, np.int64), np.full((n, K), np.nan, np.float32),
                         np.full((n, K), -1, np.int64)),
        removed={r: 0 for r in CANDIDATE_CODES[2:]}, fn_flagged={}, k_initial=k0, k_max=k0,
    )
    if keep_flags:
        result.pairs.neg_flags = np.zeros((n, K), bool)
        result.pairs.neg_reasons = np.full((n, K), None, dtype=object)
    return result


def set_attracted(pairs: MinedPairs, attract: list[Attracted]) -> None:
    """Store the flagged candidates attracted as extra positives in ``pairs`` (nothing
    when there are none). Their rank is -1: a flagged candidate is not a valid one, so
    it has no rank among them (as an easy negative's)."""
    if not attract:
        return
    pairs.fn_rows = np.concatenate([a[0] for a in attract])
    pairs.fn_ids = np.concatenate([a[1] for a in attract])
    pairs.fn_scores = np.concatenate([a[2] for a in attract])
    pairs.fn_ranks = np.full(len(pairs.fn_ids), -1, np.int64)
    pairs.fn_reasons = np.concatenate([a[3] for a in attract])


class StoreSearcher:
    """A searcher built where it is first called: the index ``options`` say over the
    vectors of ``rows``, by the one entry point (:func:`pairkit.index.open.open_searcher`,
    the call the driver makes otherwise, so the index and every search result are the
    same); pickled without the index, so the driver never builds or ships it."""

    def __init__(self, rows: StoreRows, options: Any) -> None:
        self.rows, self.options = rows, options
        self.opened: Any = None
        self.spent = {"index": 0.0, "search": 0.0}  # seconds in this process

    def __getstate__(self) -> dict[str, Any]:
        return {"rows": self.rows, "options": self.options, "opened": None,
                "spent": {"index": 0.0, "search": 0.0}}

    def release(self) -> None:
        """Forget the index built here (the blocks are done; its memory freed)."""
        self.opened = None

    def seconds(self) -> dict[str, float]:
        """Seconds this process has spent building the index and searching it."""
        return dict(self.spent)

    def skips_exactly(self, n_items: int) -> bool:
        """Whether the index built here over the store's ``n_items`` rows can skip rows
        exactly (:meth:`outside`), decided from the options without building it."""
        from pairkit.index.open import excludes_exactly

        return excludes_exactly(self.options, n_items)

    def __call__(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.timed(queries, k)

    def outside(self, queries: np.ndarray, k: int, own: np.ndarray, parts: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """The search of ``queries`` among the rows whose ``parts`` differ from ``own``
        (:meth:`pairkit.index.open.Searcher.search_outside`)."""
        return self.timed(queries, k, own, parts)

    def timed(self, queries: np.ndarray, k: int, own: np.ndarray | None = None,
              parts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The search (outside ``own``'s parts when given), the index built on first use,
        the seconds of each counted."""
        import time

        t = time.perf_counter()
        if self.opened is None:
            from pairkit.index.open import open_searcher

            self.opened = open_searcher(self.rows.load(), self.options,
                                        content_id=self.rows.content_id)
            self.spent["index"] += time.perf_counter() - t
            t = time.perf_counter()
        try:
            if own is None:
                return self.opened.search(queries, k)  # type: ignore[no-any-return]
            return self.opened.search_outside(  # type: ignore[no-any-return]
                queries, k, own, parts)
        finally:
            self.spent["search"] += time.perf_counter() - t


@dataclass
class MineBlocks:
    """What every block of anchors needs, computed once per run (and shipped once to the
    workers of a Ray cluster): rows are indices into ``anchors``."""

    ctx: SelectionContext
    anchors: np.ndarray
    positives: np.ndarray
    pos_scores: np.ndarray
    ref: np.ndarray
    k0: int
    k_cap: int
    hi: int
    keep_flags: bool
    searcher: Searcher | None
    anchor_searcher: Searcher | None
    # where the blocks read the store (its paths; ctx.vectors too when left out: load_rows)
    rows_from: StoreRows | None = None
    positives_there: bool = False  # positives scored where the blocks run (score_positives)
    pos_start: int = 0  # the anchor row of positives[0] (not 0: scored block by block)
    # the label relation: each anchor's search skips its class (all positives) rather
    # than fetching and dropping it: ``searcher.outside`` without an anchor searcher
    # (pairkit.mine.hard_negatives.skips_class)
    skip_class: bool = False
    # the near-duplicate rule's big groups (pairkit.mine.group_skip.big_groups: a code per
    # row, -1 none): each anchor's search skips those of the anchor and of its positives
    # (their rows are flagged and dropped) through ``searcher.outside``; None: fetched
    skip_groups: np.ndarray | None = None
    # each anchor's first k (pairkit.mine.selection.initial_k; None: k0 for every one)
    k_rows: np.ndarray | None = None
    # easy negatives: the part of the relation holding all but a few rows, whose anchors
    # take those few as their candidates, not draws (pairkit.mine.selection.few_outside)
    few: FewOutside | None = None

    def load_rows(self) -> MineBlocks:
        """These blocks with ``ctx.vectors`` read from the store when they were left out
        (once per process: the object is updated and kept by the worker)."""
        if self.rows_from is not None and self.ctx.vectors.size == 0 and len(self.anchors):
            from dataclasses import replace

            self.ctx = replace(self.ctx, vectors=self.rows_from.load())
        return self

    def score_positives(self, span: tuple[int, int]) -> None:
        """With ``positives_there`` (planned without the vectors): choose and score the
        positives of the anchors in ``span`` here, from the vectors read here
        (:func:`pairkit.mine.selection.choose_positives` per anchor, so the same as one
        call for all anchors); ``positives``, ``pos_scores`` and ``ref`` then hold the
        block's anchors only, from ``pos_start``."""
        if not self.positives_there:
            return
        from pairkit.mine.selection import choose_positives

        b0, b1 = span
        o = self.ctx.pos_offsets
        self.positives, self.pos_scores, self.ref = choose_positives(
            self.ctx.vectors, self.anchors[b0:b1], o[b0:b1 + 1] - o[b0],
            self.ctx.pos_ids[o[b0]:o[b1]], self.ctx.cfg.positive, self.ctx.cfg.seed)
        self.pos_start = b0


def fetch_candidates(st: MineBlocks, rows: np.ndarray, k: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates of the anchors ``rows``: ``(scores, ids, exhausted)``."""
    cfg = st.ctx.cfg
    vectors = st.ctx.vectors
    n_items = len(vectors)
    a = st.anchors[rows]
    if cfg.hard:
        if st.anchor_searcher is not None:
            s, i = st.anchor_searcher(a, k)
        elif st.skip_groups is not None:  # big near-duplicate groups (and the class) skipped
            positives = padded_rows(st.ctx.pos_offsets, st.ctx.pos_ids, rows)
            group = st.ctx.relation.group if st.skip_class else None
            s, i = search_skipping(
                st.searcher, np.asarray(vectors[a], dtype=np.float32), k, st.skip_groups,
                skipped_groups(st.skip_groups, a, positives),
                None if group is None else group[a], group)
        elif st.skip_class:  # the class skipped by the searcher itself
            group = st.ctx.relation.group
            s, i = st.searcher.outside(  # type: ignore[union-attr]
                np.asarray(vectors[a], dtype=np.float32), k, group[a], group)
        else:
            s, i = st.searcher(np.asarray(vectors[a], dtype=np.float32), k)  # type: ignore[misc]
        exhausted = np.full(len(rows), k >= n_items) | (i[:, -1] < 0)
        if cfg.min_score is not None:
            exhausted |= s[:, -1] < cfg.min_score  # everything deeper scores lower
        return s, i, exhausted
    i = drop_repeats(easy_candidates(a, k, n_items, cfg.seed))
    exhausted = np.zeros(len(rows), dtype=bool)
    if st.few is not None:  # every valid candidate of these anchors at once
        inside = st.few.parts[a] == st.few.part
        if inside.any():
            i[inside] = enumerated_candidates(a[inside], st.few, st.ctx.sources, k, cfg.seed)
            exhausted[inside] = True
    s = np.full(i.shape, -np.inf, dtype=np.float32)
    ok = i >= 0
    s[ok] = row_dots(vectors, np.broadcast_to(a[:, None], i.shape)[ok], i[ok])
    return s, i, exhausted


def mine_block(st: MineBlocks, span: tuple[int, int]) -> MineResult:
    """The negatives of anchors ``span[0] .. span[1] - 1``: a :class:`MineResult` whose
    arrays (and attracted rows) are relative to ``span[0]``. Anchors that come up short
    are searched again with 4x the k until they have the window or the store is
    exhausted."""
    st = st.load_rows()
    st.score_positives(span)
    cfg = st.ctx.cfg
    b0, b1 = span
    p0 = st.pos_start
    part = empty_result(st.anchors[b0:b1], st.positives[b0 - p0:b1 - p0],
                        st.pos_scores[b0 - p0:b1 - p0],
                        cfg.num_negatives, st.keep_flags, st.k0)
    attract: list[Attracted] = []
    pending = np.arange(b0, b1)
    ks = np.full(len(pending), st.k0, np.int64) if st.k_rows is None else st.k_rows[pending]
    first = True
    while len(pending):
        still: list[np.ndarray] = []
        drew_on = 0  # anchors drawing on for their unmet rows (draw_for_unmet)
        for k in np.unique(ks):  # the anchors of one k searched together
            k = int(k)
            group = pending[ks == k]
            step = max(1, cfg.max_k_entries // max(k, 1))
            step = min(cfg.batch_size, step) if first else step
            for c0 in range(0, len(group), step):
                rows = group[c0:c0 + step]
                s, i, exh = fetch_candidates(st, rows, k)
                block = select_negatives(st.ctx, rows, st.anchors[rows], i, s,
                                         st.ref[rows - p0], exh | (k >= st.k_cap), cfg.hard)
                if (not cfg.hard and block.short.any() and k < st.k_cap
                        and 4 * k >= len(st.ctx.vectors)):  # next: more draws than rows
                    drew_on += finish_late(st, part, block, rows, k, b0, attract)
                    rows = rows[~block.short]
                    block = block.take(~block.short)
                done = ~block.short
                collect(part, block.take(done), rows[done] - b0, st.hi, cfg, st.keep_flags,
                        attract)
                still.append(rows[block.short])
        short = np.sort(np.concatenate(still)) if still else np.zeros(0, np.int64)
        if len(short) or drew_on:
            if first:
                part.anchors_retried += len(short) + drew_on
            part.retries += 1
        if len(short):
            ks = np.minimum(st.k_cap, ks[np.searchsorted(pending, short)] * 4)
            part.k_max = max(part.k_max, int(ks.max()))
        pending, first = short, False
    attract = in_row_order(attract)
    set_attracted(part.pairs, attract)
    return part


def finish_late(st: MineBlocks, part: MineResult, block: Selection, rows: np.ndarray,
                k: int, b0: int, attract: list[Attracted]) -> int:
    """Collect into ``part`` the final selection of the anchors of ``block.short`` (easy
    negatives short after ``k`` draws, ``4 k >= N``): :func:`draw_for_unmet`, a few
    anchors at a time (its arrays are k + N wide). Returns how many drew on."""
    cfg = st.ctx.cfg
    late = np.flatnonzero(block.short)
    per = max(1, cfg.max_k_entries // 8 // (k + 1))
    drew_on = 0
    for c0 in range(0, len(late), per):
        these = np.zeros(len(rows), dtype=bool)
        these[late[c0:c0 + per]] = True
        r = rows[these]
        final, drawn, drew = draw_for_unmet(st.ctx, r, st.anchors[r], block.take(these),
                                            st.ref[r - st.pos_start], k, st.k_cap,
                                            cfg.max_k_entries)
        collect(part, final, r - b0, st.hi, cfg, st.keep_flags, attract)
        drew_on += drew
        part.k_max = max(part.k_max, drawn)
    return drew_on


def in_row_order(attract: list[Attracted]) -> list[Attracted]:
    """A block's attracted rows (:func:`collect`) in anchor row order, each anchor's in the
    order they were collected: the same whatever the anchors' k and search rounds."""
    if len(attract) < 2:
        return attract
    rows = np.concatenate([a[0] for a in attract])
    order = np.argsort(rows, kind="stable")
    return [(rows[order], *(np.concatenate([a[j] for a in attract])[order]
                            for j in (1, 2, 3)))]  # type: ignore[list-item]


def add_counts(into: Any, part: Any) -> None:
    """Add a block's counts (``removed``, ``fn_flagged`` by rule, ``retries``,
    ``anchors_retried``; ``k_max`` the larger) into a run's (a :class:`MineResult`, or
    anything with those fields)."""
    for name, count in part.removed.items():
        into.removed[name] = into.removed.get(name, 0) + count
    for name, count in part.fn_flagged.items():
        into.fn_flagged[name] = into.fn_flagged.get(name, 0) + count
    into.retries += part.retries
    into.anchors_retried += part.anchors_retried
    into.k_max = max(into.k_max, part.k_max)


def merge_block(result: MineResult, part: MineResult, b0: int,
                attract: list[Attracted]) -> None:
    """Write a block's :class:`MineResult` (from :func:`mine_block`) into ``result``;
    its attracted rows are appended to ``attract`` (shifted by ``b0``) for
    :func:`set_attracted`."""
    p, q = result.pairs, part.pairs
    rows = slice(b0, b0 + len(q.neg_ids))
    p.neg_ids[rows], p.neg_scores[rows], p.neg_ranks[rows] = (q.neg_ids, q.neg_scores,
                                                              q.neg_ranks)
    if p.neg_flags is not None and q.neg_flags is not None:
        p.neg_flags[rows], p.neg_reasons[rows] = q.neg_flags, q.neg_reasons
    add_counts(result, part)
    if q.fn_rows is not None and len(q.fn_rows):
        attract.append((q.fn_rows + b0, q.fn_ids, q.fn_scores, q.fn_reasons))


def collect(result: MineResult, block: Selection, rows: np.ndarray, hi: int, cfg: MineConfig,
            keep_flags: bool, attract: list[Attracted]) -> None:
    """Write a block's selection into ``result`` (rows ``rows``) and add its counts."""
    p = result.pairs
    sel = block.neg_pos
    ok = sel >= 0
    safe = np.maximum(sel, 0)
    p.neg_ids[rows] = np.where(ok, np.take_along_axis(block.ids, safe, 1), -1)
    p.neg_scores[rows] = np.where(ok, np.take_along_axis(block.scores, safe, 1), np.nan)
    p.neg_ranks[rows] = np.where(ok & cfg.hard, np.take_along_axis(block.vrank, safe, 1), -1)
    if keep_flags and block.flags is not None:
        p.neg_flags[rows] = ok & np.take_along_axis(block.flags, safe, 1)
        reasons = np.take_along_axis(block.reasons, safe, 1)
        p.neg_reasons[rows] = np.where(p.neg_flags[rows], reasons, None)
    # counts over the examined candidates: up to the one that completed the window
    valid = block.code == 0
    before = block.vrank + 1 - valid  # valid candidates ahead of each one
    examined = (before < hi) & (block.code != CODE["padding"])
    codes = block.code[examined]
    counts = np.bincount(codes, minlength=len(CANDIDATE_CODES))
    for name in CANDIDATE_CODES[2:]:
        result.removed[name] += int(counts[CODE[name]])
    if block.flags is not None:
        f = block.flags & examined
        values, counts_ = np.unique(block.reasons[f].astype(str), return_counts=True)
        for reason, count in zip(values, counts_, strict=True):
            for r in str(reason).split("|"):
                result.fn_flagged[r] = result.fn_flagged.get(r, 0) + int(count)
        if cfg.fn_mode == "attract":
            # flagged candidates become extra positives: the first K per anchor
            order_pos = np.where(f, np.arange(f.shape[1])[None, :], np.iinfo(np.int64).max)
            first = np.argsort(order_pos, axis=1, kind="stable")[:, : cfg.num_negatives]
            take = np.take_along_axis(f, first, 1)
            r, c = np.nonzero(take)
            cols = first[r, c]
            attract.append((rows[r], block.ids[r, cols], block.scores[r, cols],
                            block.reasons[r, cols].astype(object)))
