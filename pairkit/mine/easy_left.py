"""Easy negatives of anchors short of their window once more draws than rows would be
needed: the rows their draws have not met are judged once; an anchor with none left that
could be taken stops, the others draw on for those rows alone (a filter that nothing, or
almost nothing, passes drew 16 x N an anchor, each round sorted and judged whole)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pairkit.index.search import row_dots
from pairkit.mine.selection import (
    Selection,
    SelectionContext,
    classify_candidates,
    easy_candidates,
    select_negatives,
)


def unmet_wanted(ctx: SelectionContext, rows: np.ndarray, anchors: np.ndarray,
                 block: Selection, ref: np.ndarray, max_entries: int
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(sel, valid, flagged)`` over the anchors of ``block.short`` in chunks of
    at most ``max_entries // N``: ``sel`` their places in ``anchors``; ``valid`` and
    ``flagged`` (len(sel), N) bool the rows their draws have not met that later draws
    could still add to the result: valid ones, and under ``--fn-mode attract`` (while
    fewer than K flagged rows were met) flagged ones (else none)."""
    cfg = ctx.cfg
    n_items = len(ctx.vectors)
    short = np.flatnonzero(block.short)
    step = max(1, max_entries // max(n_items, 1))
    for c0 in range(0, len(short), step):
        sel = short[c0:c0 + step]
        drawn = block.ids[sel]
        met = as_rows(drawn, drawn >= 0, n_items)
        width = int((~met).sum(axis=1).max(initial=0))
        order = np.argsort(met, axis=1, kind="stable")[:, :width]  # unmet rows first
        ids = np.where(np.take_along_axis(~met, order, 1), order, -1)
        a = anchors[sel]
        scores = np.full(ids.shape, -np.inf, dtype=np.float32)
        ok = ids >= 0
        scores[ok] = row_dots(ctx.vectors, np.broadcast_to(a[:, None], ids.shape)[ok], ids[ok])
        code, flags, _ = classify_candidates(ctx, rows[sel], a, ids, scores, ref[sel])
        attractable = np.zeros(ids.shape, dtype=bool)
        if cfg.fn_mode == "attract" and flags is not None and block.flags is not None:
            enough = block.flags[sel].sum(axis=1) >= cfg.num_negatives
            attractable = flags & ~enough[:, None]
        yield sel, as_rows(ids, (code == 0) & ok, n_items), as_rows(ids, attractable & ok,
                                                                     n_items)


def as_rows(ids: np.ndarray, mask: np.ndarray, n_items: int) -> np.ndarray:
    """(n, n_items) bool: the rows ``ids[mask]`` of each row of ``ids`` (n, m)."""
    out = np.zeros((len(ids), n_items), dtype=bool)
    r, c = np.nonzero(mask)
    out[r, ids[r, c]] = True
    return out


def draw_for_unmet(ctx: SelectionContext, rows: np.ndarray, anchors: np.ndarray,
                   block: Selection, ref: np.ndarray, k: int, k_cap: int,
                   max_entries: int) -> tuple[Selection, int, int]:
    """The final selection of the anchors of ``block`` (easy negatives short of their
    window after their first ``k`` draws, ``block.ids``, with ``4 k >= N``): each one's
    draws ``k .. k_cap - 1`` are looked up, chunk by chunk, only for the rows not met yet
    that could still be taken (:func:`unmet_wanted`), until it has met enough of them
    for its window (and K flagged ones under ``--fn-mode attract``), every one of them,
    or ``k_cap`` draws. Its candidates are then its first ``k`` draws followed by those
    rows in the order the draws first meet them: the rows that drawing on to ``k_cap``
    (4x as many a round) would have added, less those that can't be taken, so the same
    negatives and attracted rows, without sorting and judging ``16 x N`` draws (only the
    counts of removed candidates are of fewer: those rows are not examined). Returns
    ``(selection, draws, anchors)``: every row of it final (not short), the most draws
    an anchor looked up, and how many anchors drew on."""
    cfg = ctx.cfg
    K = cfg.num_negatives
    n_items = len(ctx.vectors)
    n = len(anchors)
    extra = [np.zeros(0, np.int64)] * n
    most, drew = k, 0
    valid_before = (block.code == 0).sum(axis=1)
    flagged_before = (np.zeros(n, np.int64) if block.flags is None
                      else block.flags.sum(axis=1))
    # about 8 arrays of N int64 an anchor below (draws, their first meetings, order):
    # chunks of an eighth of ``max_entries`` keep them to about one chunk of judging
    for sel, valid, flagged in unmet_wanted(ctx, rows, anchors, block, ref,
                                            max(1, max_entries // 8)):
        wanted = valid | flagged
        first = np.full(wanted.shape, -1, np.int64)  # the draw that first meets the row
        need_valid = K - valid_before[sel]
        need_flagged = K - flagged_before[sel]
        active = wanted.any(axis=1)
        drew += int(active.sum()) if k < k_cap else 0
        start = k
        while active.any() and start < k_cap:
            stop = min(k_cap, start + n_items)
            act = np.flatnonzero(active)
            ids = easy_candidates(anchors[sel][act], stop, n_items, cfg.seed, start=start)
            hit = (np.take_along_axis(wanted[act], ids, 1)
                   & (np.take_along_axis(first[act], ids, 1) < 0))
            r, c = np.nonzero(hit)
            key = act[r] * n_items + ids[r, c]
            _, once = np.unique(key, return_index=True)  # a row's first draw in the chunk
            first[act[r[once]], ids[r[once], c[once]]] = start + c[once]
            most = max(most, stop)
            met = first >= 0
            got_valid = (met & valid).sum(axis=1)
            done = got_valid >= need_valid
            rest = got_valid == valid.sum(axis=1)
            if cfg.fn_mode == "attract":
                got_flagged = (met & flagged).sum(axis=1)
                rest &= (got_flagged >= need_flagged) | (got_flagged == flagged.sum(axis=1))
            active &= ~(done | rest)
            start = stop
        key = np.where(first >= 0, first, np.iinfo(np.int64).max)
        order = np.argsort(key, axis=1, kind="stable")
        for j, s in enumerate(sel):
            extra[s] = order[j, :int((first[j] >= 0).sum())]
    width = max((len(e) for e in extra), default=0)
    more = np.full((n, width), -1, np.int64)
    for j, e in enumerate(extra):
        more[j, :len(e)] = e
    scores = np.full(more.shape, -np.inf, dtype=np.float32)
    ok = more >= 0
    scores[ok] = row_dots(ctx.vectors, np.broadcast_to(anchors[:, None], more.shape)[ok],
                          more[ok])
    ids = np.concatenate([block.ids, more], axis=1)
    scores = np.concatenate([block.scores, scores], axis=1)
    final = select_negatives(ctx, rows, anchors, ids, scores, ref, np.ones(n, dtype=bool),
                             False)
    return final, most, drew

