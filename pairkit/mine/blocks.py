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
from pairkit.index.search import pair_scores, row_dots, row_norms, sort_results
from pairkit.mine.config import MineConfig
from pairkit.mine.group_skip import search_skipping, skipped_groups
from pairkit.mine.selection import (
    CANDIDATE_CODES,
    CODE,
    Selection,
    SelectionContext,
    drop_repeats,
    easy_candidates,
    padded_rows,
    select_negatives,
)

Searcher = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
# attracted rows of one block: (anchor rows, item ids, scores, reasons)
Attracted = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# how far a search's float32 score may be from the pair's own (relative to max(1, |score|)):
# a block's matrix product, FAISS's kernels, torch's (float32, no TF32) all round within
# ~1e-6 on unit rows; the margin is wide so that no left-out row can beat a kept one
SEARCH_ROUNDING = 1e-4


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
    # bounds of the rows' norms for the candidates' exact scores (pair_scores), made where
    # the blocks run on first use (select_rows); None for rows read on demand
    norms: np.ndarray | None = None

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


def search_candidates(st: MineBlocks, rows: np.ndarray, k: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The search's ``(scores, ids)`` (n, k) of the anchors ``rows`` (``--hard``), best
    first by the search's own scores."""
    vectors = st.ctx.vectors
    a = st.anchors[rows]
    if st.anchor_searcher is not None:
        return st.anchor_searcher(a, k)  # type: ignore[no-any-return]
    if st.skip_groups is not None:  # big near-duplicate groups (and the class) skipped
        positives = padded_rows(st.ctx.pos_offsets, st.ctx.pos_ids, rows)
        group = st.ctx.relation.group if st.skip_class else None
        return search_skipping(  # type: ignore[no-any-return]
            st.searcher, np.asarray(vectors[a], dtype=np.float32), k, st.skip_groups,
            skipped_groups(st.skip_groups, a, positives),
            None if group is None else group[a], group)
    if st.skip_class:  # the class skipped by the searcher itself
        group = st.ctx.relation.group
        return st.searcher.outside(  # type: ignore[no-any-return,union-attr]
            np.asarray(vectors[a], dtype=np.float32), k, group[a], group)
    return st.searcher(np.asarray(vectors[a], dtype=np.float32), k)  # type: ignore[misc]


def easy_block(st: MineBlocks, rows: np.ndarray, k: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Easy candidates of the anchors ``rows``: ``(scores, ids, exhausted)``."""
    cfg = st.ctx.cfg
    vectors = st.ctx.vectors
    a = st.anchors[rows]
    i = drop_repeats(easy_candidates(a, k, len(vectors), cfg.seed))
    s = np.full(i.shape, -np.inf, dtype=np.float32)
    ok = i >= 0
    s[ok] = row_dots(vectors, np.broadcast_to(a[:, None], i.shape)[ok], i[ok])
    return s, i, np.zeros(len(rows), dtype=bool)


def select_rows(st: MineBlocks, rows: np.ndarray, k: int, first: bool = True
                ) -> list[tuple[np.ndarray, Selection]]:
    """The selections of the anchors ``rows`` with ``k`` candidates fetched, as parts
    ``(rows, Selection)``. With ``--hard`` on the anchors' first search (``first``: their
    own k of :func:`pairkit.mine.selection.initial_k`, whose last ``hi`` columns are
    spare room) the candidates are scored again (:func:`rescored`) in two
    steps: the first ``k - hi`` columns, then all k for the anchors that those leave
    short (a prefix of the search is a search of that k: the same selection, counts
    included, for every anchor it does not leave short)."""
    cfg = st.ctx.cfg
    p0 = st.pos_start
    if not cfg.hard:
        s, i, exh = easy_block(st, rows, k)
        return [(rows, select_negatives(st.ctx, rows, st.anchors[rows], i, s,
                                        st.ref[rows - p0], exh | (k >= st.k_cap), False))]
    s, i = search_candidates(st, rows, k)
    vectors = st.ctx.vectors
    if isinstance(vectors, np.ndarray) and (st.norms is None or len(st.norms) != len(vectors)):
        st.norms = row_norms(vectors)  # rows read on demand: their norms where they are read

    def scored(at: np.ndarray, width: int) -> Selection:
        sub = rows[at]
        ran_out = (width == k and k >= len(vectors)) | (
            i[at, width] < 0 if width < k else np.zeros(len(sub), bool))
        e, ids, exh = rescored(vectors, st.norms, st.anchors[sub], s[at, :width],
                               i[at, :width], ran_out, cfg.min_score, settle=not first)
        if width == k:
            exh = exh | (k >= st.k_cap)
        return select_negatives(st.ctx, sub, st.anchors[sub], ids, e, st.ref[sub - p0], exh,
                                True)

    width = k - st.hi if first and k - st.hi > st.hi else k
    first = scored(np.arange(len(rows)), width)
    if width == k:
        return [(rows, first)]
    again = first.short & (i[:, width] >= 0)
    parts = [(rows[~again], first.take(~again))]
    if again.any():
        parts.append((rows[again], scored(np.flatnonzero(again), k)))
    return parts


def rescored(vectors: np.ndarray, norms: np.ndarray | None, anchors: np.ndarray,
             s: np.ndarray, i: np.ndarray, all_rows: bool | np.ndarray,
             min_score: float | None, settle: bool = False,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A search's candidates ``(s, i)`` of ``anchors`` scored again pair by pair
    (:func:`pairkit.index.search.pair_scores` with the rows' ``norms``: the exactly rounded
    dot products, the same bits whatever the block or the engine that found them) and
    ordered by those scores, ties by id: ``(scores, ids, exhausted)``.

    The search's own scores (a block's matrix product, rounded by the block's shape)
    decide only which rows were fetched, so a candidate whose new score is not above the
    last fetched search score by more than :data:`SEARCH_ROUNDING` could trade places
    with one left out: unless the anchor's search is exhausted (``all_rows``, per anchor or
    for all: nothing was left out; the index ran out; or everything left out scores below
    ``min_score``), such candidates are dropped (id -1), and an anchor whose window needs
    them is searched again deeper. What is left is the same prefix of the exact order in
    any block; except where those candidates hold an exact tie (:func:`tied`): the tie's
    fetched rows and those above it are kept, not searched through; and in a search
    deeper than the first (``settle``), where all are kept: at most one deeper search for
    them. A band of rows whose scores are that close (thousands of near-identical
    rows: re-encoded images) could otherwise take a deeper search per 4x the k until it
    was fetched whole; what is kept is then the exact order but for a row left out within
    the search's rounding of the last fetched score."""
    found = i >= 0
    last = np.where(found, s, np.inf).min(axis=1, initial=np.inf)
    bound = last + SEARCH_ROUNDING * np.maximum(1.0, np.abs(last))
    exhausted = np.broadcast_to(np.asarray(all_rows, bool), (len(i),)) | ~found[:, -1]
    if min_score is not None:
        exhausted |= bound < min_score  # everything deeper scores lower
    exact = pair_scores(vectors, anchors, i, norms)
    keep = found & (exhausted[:, None] | settle | (exact > bound[:, None]) | (exact >= tied(
        np.where(found & (exact <= bound[:, None]), exact, -np.inf))[:, None]))
    exact = np.where(keep, exact, -np.inf)
    exact, ids = sort_results(exact, np.where(keep, i, -1))
    return exact, ids, exhausted


def tied(untrusted: np.ndarray) -> np.ndarray:
    """Per row of ``untrusted`` (n, k) (the exact scores of the candidates that
    :func:`rescored` cannot place against the rows left out, -inf elsewhere): the highest
    score that two or more of them share exactly (identical rows, typically), +inf where
    none does.

    Fetched rows of that score show the search reached it (up to its rounding); the
    tie may go on among the rows left out, and then no deeper search
    places it until every row of it has been fetched (thousands, for a big group of
    identical rows: each retry 4x the k). Its fetched rows, and any candidate scored above
    it, are taken as they are, ties by id: what the rows left out could change is which rows
    of the tie come first, and the order against a row left out within the search's
    rounding above it."""
    out = np.full(len(untrusted), np.inf, dtype=np.float32)
    if untrusted.shape[1] < 2:
        return out
    s = -np.sort(-untrusted, axis=1)  # descending
    same = (s[:, 1:] == s[:, :-1]) & np.isfinite(s[:, 1:])
    has = same.any(axis=1)
    out[has] = s[has, np.argmax(same[has], axis=1)]
    return out


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
        for k in np.unique(ks):  # the anchors of one k searched together
            k = int(k)
            group = pending[ks == k]
            step = max(1, cfg.max_k_entries // max(k, 1))
            step = min(cfg.batch_size, step) if first else step
            for c0 in range(0, len(group), step):
                for rows, block in select_rows(st, group[c0:c0 + step], k, first):
                    done = ~block.short
                    collect(part, block.take(done), rows[done] - b0, st.hi, cfg,
                            st.keep_flags, attract)
                    still.append(rows[block.short])
        short = np.sort(np.concatenate(still)) if still else np.zeros(0, np.int64)
        if len(short):
            if first:
                part.anchors_retried += len(short)
            part.retries += 1
            ks = np.minimum(st.k_cap, ks[np.searchsorted(pending, short)] * 4)
            part.k_max = max(part.k_max, int(ks.max()))
        pending, first = short, False
    attract = in_row_order(attract)
    set_attracted(part.pairs, attract)
    return part


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
