"""Easy negatives: whether an anchor short of its window has a row left that more draws
could add (else it stops drawing: a filter that nothing passes drew 16 x N an anchor)."""

from __future__ import annotations

import numpy as np

from pairkit.index.search import row_dots
from pairkit.mine.selection import Selection, SelectionContext, classify_candidates


def nothing_left(ctx: SelectionContext, rows: np.ndarray, anchors: np.ndarray,
                 block: Selection, ref: np.ndarray, max_entries: int) -> np.ndarray:
    """(n,) bool: the anchors of ``block.short`` (easy negatives, ``block.ids`` their
    draws) for which drawing again would change nothing: every row of the store their
    draws have not met is invalid for them (judged here as the draws would judge it:
    each rule judges a pair on its own), and under ``--fn-mode attract`` their draws
    already met K flagged rows or none is left unmet. Longer draws repeat the first ones
    and then meet only those rows, so the selection, and the first K flagged rows, are
    those of these draws. ``ref`` (n,) the anchors' positive scores; at most
    ``max_entries`` (anchor, row) pairs are judged at once."""
    cfg = ctx.cfg
    n_items = len(ctx.vectors)
    out = np.zeros(len(anchors), dtype=bool)
    short = np.flatnonzero(block.short)
    step = max(1, max_entries // max(n_items, 1))
    for c0 in range(0, len(short), step):
        sel = short[c0:c0 + step]
        drawn = block.ids[sel]
        met = np.zeros((len(sel), n_items), dtype=bool)
        r, c = np.nonzero(drawn >= 0)
        met[r, drawn[r, c]] = True
        width = int((~met).sum(axis=1).max(initial=0))
        order = np.argsort(met, axis=1, kind="stable")[:, :width]  # unmet rows first
        ids = np.where(np.take_along_axis(~met, order, 1), order, -1)
        a = anchors[sel]
        scores = np.full(ids.shape, -np.inf, dtype=np.float32)
        ok = ids >= 0
        scores[ok] = row_dots(ctx.vectors, np.broadcast_to(a[:, None], ids.shape)[ok], ids[ok])
        code, flags, _ = classify_candidates(ctx, rows[sel], a, ids, scores, ref[sel])
        left = (code == 0).any(axis=1)
        if cfg.fn_mode == "attract" and flags is not None and block.flags is not None:
            enough = block.flags[sel].sum(axis=1) >= cfg.num_negatives
            left |= flags.any(axis=1) & ~enough
        out[sel] = ~left
    return out
