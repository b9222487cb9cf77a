"""How far to trust a run's false-negative flags, without labels.

The other views of an anchor's source are known positives: hide that they share
a source, offer them to the rules as if they were candidate negatives, and count
how many the rules flag. That is the rules' **recall on known positives** (an
optimistic proxy of their recall on same-class negatives: another view of the
same image is easier to recognise than another image of the same class).
Recall alone can be bought by flagging everything, so the same rules are also
run on **random pairs** (anchor, uniformly drawn item): the share flagged there
is what the rules remove from a random sample, about the share of same-class
pairs when they are precise (1/C for C balanced classes), much more when they
over-flag. When the store has labels, the share of random pairs that share a
label is reported next to it for comparison.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.mine.fn_context import FnContext, label_codes

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig

HIDDEN_POSITIVES_CAP = 64  # other views offered per anchor; more: drawn at random
SCORE_BLOCK_BYTES = 1 << 26  # gathered candidate vectors per block of anchors


def estimate_quality(ctx: FnContext, config: FalseNegativeConfig, *, sample: int = 2000,
                     seed: int = 0) -> dict[str, Any]:
    """Label-free quality figures of ``config``'s rules on this store.

    Returns a dict: ``anchors`` (sampled anchors with another view), ``hidden_positive_recall``
    (share of their other views flagged; None without multi-view sources),
    ``random_pair_flag_rate`` (share of random pairs flagged), and with labels
    ``random_pair_same_label`` (share of those random pairs sharing a label).
    """
    from pairkit.mine.false_negatives import flag_false_negatives

    rng = np.random.default_rng([seed, 17])
    n = ctx.count
    out: dict[str, Any] = {"anchors": 0, "hidden_positive_recall": None,
                           "random_pair_flag_rate": None}
    if n < 2:
        return out
    # rules judge by similarity only: the label rule would "find" what labels say
    judged = tuple(r for r in config.rules if r != "label")
    if not judged:
        return out
    cfg = replace(config, rules=judged)
    order = np.argsort(ctx.sources, kind="stable")  # rows by source, CSR with starts
    counts = np.bincount(ctx.sources)
    starts = np.cumsum(counts) - counts
    multi = np.flatnonzero(counts[ctx.sources] > 1)
    if len(multi):
        anchors = np.sort(rng.choice(multi, size=min(sample, len(multi)), replace=False))
        cand = _hidden_positives(ctx.sources, order, starts, counts, anchors,
                                 np.random.default_rng([seed, 17, HIDDEN_POSITIVES_CAP]))
        hidden = _hidden(ctx)
        scores = _scores(ctx.vectors, anchors, cand)
        empty = [np.zeros(0, np.int64)] * len(anchors)
        flags, _ = flag_false_negatives(hidden, anchors, cand, scores,
                                        np.full(len(anchors), np.nan, np.float32), cfg, empty)
        valid = cand >= 0
        out["anchors"] = int(len(anchors))
        out["hidden_positive_recall"] = round(float(flags[valid].mean()), 4)
    m = min(sample, n)
    anchors = np.sort(rng.choice(n, size=m, replace=False))
    other = rng.integers(0, n, size=(m, 1))
    other = np.where(ctx.sources[other[:, 0]] == ctx.sources[anchors], -1, other[:, 0])[:, None]
    scores = _scores(ctx.vectors, anchors, other)
    flags, _ = flag_false_negatives(ctx, anchors, other, scores,
                                    np.full(m, np.nan, np.float32), cfg)
    valid = other >= 0
    out["random_pair_flag_rate"] = round(float(flags[valid].mean()), 4) if valid.any() else None
    codes = label_codes(ctx)
    if codes is not None:
        from pairkit.mine.stats import label_share, pair_label_counts

        share = label_share(*pair_label_counts(
            codes[anchors][valid[:, 0]], codes[np.maximum(other[:, 0], 0)][valid[:, 0]]))
        if share is not None:
            out["random_pair_same_label"] = share
    return out


def _hidden_positives(sources: np.ndarray, order: np.ndarray, starts: np.ndarray,
                      counts: np.ndarray, anchors: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
    """(n, v) the other views of each anchor's source, -1 padded (the anchor's own slot
    too), in row order; only for the anchors, from the rows sorted by source (``order``,
    ``starts``, ``counts``). A source with more than :data:`HIDDEN_POSITIVES_CAP` other
    views offers that many, drawn with ``rng`` (an anchor of one 10,000-view source
    would otherwise be scored against all of them)."""
    cap = HIDDEN_POSITIVES_CAP
    src = sources[anchors]
    c = counts[src]
    width = int(min(c.max(), cap + 1))
    col = np.arange(width)
    at = np.minimum(starts[src][:, None] + col, len(order) - 1)
    cand = np.where(col < c[:, None], order[at], -1)
    cand[cand == anchors[:, None]] = -1
    for i in np.flatnonzero(c - 1 > cap):
        rows = order[starts[src[i]]: starts[src[i]] + c[i]]
        rows = rows[rows != anchors[i]]
        cand[i, :cap] = rows[np.sort(rng.choice(len(rows), size=cap, replace=False))]
        cand[i, cap:] = -1
    return cand


def _scores(vectors: np.ndarray, anchors: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """(n, k) float32 inner products of each anchor with its candidates (-inf: -1),
    in blocks of anchors of about :data:`SCORE_BLOCK_BYTES` gathered vectors."""
    out = np.full(cand.shape, -np.inf, dtype=np.float32)
    if cand.size == 0:
        return out
    per_anchor = cand.shape[1] * vectors.shape[1] * vectors.dtype.itemsize
    step = max(1, SCORE_BLOCK_BYTES // max(1, per_anchor))
    for s in range(0, len(anchors), step):
        c = cand[s: s + step]
        x = vectors[anchors[s: s + step]]
        rows = vectors[np.maximum(c, 0).ravel()].reshape(*c.shape, -1)  # arrays and views
        sims = np.einsum("nd,nkd->nk", x, rows).astype(np.float32)
        out[s: s + step] = np.where(c >= 0, sims, -np.inf)
    return out


def _hidden(ctx: FnContext) -> FnContext:
    """The context with every row its own source (so rules can't see shared sources),
    sharing everything else that was computed. Near-duplicate groups are built per
    source, so here the near-duplicate rule compares each pair with its threshold (never
    the pixel check: every view of a source reads the same file). The mutual-neighbour
    rule gets no pairs: its lists hold only rows of other sources, so it never relates
    the views this context is offered (an empty set is that answer without making the
    pairs again for a million hidden sources: ~0.2 GB at 1M rows); the run's pairs, kept,
    are keyed by its source codes and looked up by row here they matched unrelated
    pairs."""
    return replace(ctx, sources=np.arange(ctx.count, dtype=np.int64), source_views=None,
                   source_index=None,
                   groups=None, pairwise_near_duplicates=True, paths=None,
                   mutual_source_keys=np.zeros(0, dtype=np.int64))
