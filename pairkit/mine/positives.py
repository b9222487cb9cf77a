"""Mined positives: items of *other* sources that the rules judge to be the same thing
as the anchor, each with a reason and a confidence.

Two kinds, strongest first:

- ``near_duplicate``: the anchor's near-duplicate group mates (the same picture
  re-encoded, resized, shifted: :mod:`pairkit.mine.near_duplicates`), confidence 1.
- ``mutual_neighbour``: ``j`` is among the anchor's ``neighbours`` nearest rows of other
  sources *and* the anchor is among ``j``'s, nearest in the partially whitened space of
  :mod:`pairkit.mine.whitening` (fewer hubs: more mutual pairs at the same precision).
  Mutual k-nearest neighbours are the reciprocal relation of Qin et al. 2011 / Zhong et
  al. 2017, used as positives by NNCLR (Dwibedi et al. ICCV 2021) and the neighbour
  mining of SCAN (Van Gansbeke et al. ECCV 2020).
  Confidence: the share of the ``cluster`` rule's consensus runs in which the two share
  a cluster when those runs exist (agreement of two independent signals, the kNN graph
  and the spectral clusters), else 1 - (rank / neighbours).

Measured (docs/benchmarks.md, "Downstream"): the mutual neighbours are the anchor's class
0.79 of the time on fm0 (plain top-10 neighbours: 0.75), 0.84 on mnist5k, 0.73 on the
long-tailed fm0-lt and 0.91 on the demo's digits; training with them as positives
(``pairkit train`` swaps an example's view positive for one of them half of the time) is
what moves held-out kNN above the raw features there.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from pairkit.errors import UsageError
from pairkit.mine.whitening import DEFAULT_POWER

REASONS = ("near_duplicate", "mutual_neighbour")
DEFAULT_PER_ANCHOR = 10
DEFAULT_NEIGHBOURS = 10


@dataclass(frozen=True)
class PositiveConfig:
    """``per_anchor``: the most mined positives kept per anchor (0: none mined);
    ``neighbours``: the depth of the mutual-neighbour test; ``whitening``: the power of
    the partial PCA whitening the neighbours are found in (:mod:`pairkit.mine.whitening`;
    0: plain cosine)."""

    per_anchor: int = DEFAULT_PER_ANCHOR
    neighbours: int = DEFAULT_NEIGHBOURS
    whitening: float = DEFAULT_POWER

    def check(self) -> None:
        """Raise :class:`UsageError` naming the first bad value."""
        if self.per_anchor < 0:
            raise UsageError(f"--positives must be >= 0, got {self.per_anchor}")
        if self.neighbours < 1:
            raise UsageError(f"--positive-neighbours must be >= 1, got {self.neighbours}")
        if not 0.0 <= self.whitening <= 0.5:  # also refuses NaN
            raise UsageError(f"--positive-whitening must be in [0, 0.5], got {self.whitening}")


@dataclass(frozen=True)
class MinedPositives:
    """Flat lists, ordered by anchor row, then strongest first: ``rows`` index into the
    anchors, ``ids`` item ids, ``scores`` cosine to the anchor, ``confidence`` in [0, 1],
    ``reasons`` one of :data:`REASONS`. All (m,). Within an anchor: near-duplicates first,
    then by confidence, then by score."""

    rows: np.ndarray
    ids: np.ndarray
    scores: np.ndarray
    confidence: np.ndarray
    reasons: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def empty(cls) -> MinedPositives:
        e = np.zeros(0, dtype=np.int64)
        return cls(e, e, np.zeros(0, np.float32), np.zeros(0, np.float32),
                   np.zeros(0, dtype=object))


def mutual_neighbours(ids: np.ndarray) -> np.ndarray:
    """(N, m) bool: ``ids[i, r]`` is a row whose own list ``ids[j]`` holds ``i``.

    ``ids`` (N, m) int64: every row's nearest rows (-1 padded). Vectorised: a pair
    (i, j) is mutual when (j, i) is also an edge, found by sorting edge keys.
    """
    from pairkit.core.unique import sorted_unique

    n, m = ids.shape
    if n == 0 or m == 0:
        return np.zeros((n, m), dtype=bool)
    src = np.repeat(np.arange(n, dtype=np.int64), m)
    dst = ids.reshape(-1)
    ok = dst >= 0
    key = np.where(ok, src * n + dst, -1)
    back = np.where(ok, np.maximum(dst, 0) * n + src, -2)
    edges = sorted_unique(key[ok])  # np.unique's hash path is ~70x slower here
    pos = np.searchsorted(edges, back)
    pos = np.minimum(pos, max(len(edges) - 1, 0))
    found = ok & (len(edges) > 0) & (edges[pos] == back) if len(edges) else np.zeros_like(ok)
    return found.reshape(n, m)


def mine_positives(anchors: np.ndarray, neighbour_ids: np.ndarray,
                   neighbour_scores: np.ndarray, cfg: PositiveConfig, *,
                   groups: np.ndarray | None = None, vectors: np.ndarray | None = None,
                   cluster_assign: np.ndarray | None = None,
                   near_duplicate_threshold: float | None = None) -> MinedPositives:
    """The mined positives of ``anchors`` (n,) item ids.

    ``neighbour_ids``/``neighbour_scores`` (N, m >= cfg.neighbours): every row's nearest
    rows of other sources, best first (-1 padded), as
    :func:`pairkit.mine.fn_context.knn_neighbours` gives them; ``groups`` (N,) the
    near-duplicate group per item (-1: none); ``vectors`` (N, d) normalised, for the
    scores of group mates; ``cluster_assign`` (G, N) the consensus runs of the cluster
    rule (confidence), or None. ``near_duplicate_threshold``: without ``groups``, a mutual
    neighbour at least this similar is a ``near_duplicate`` (confidence 1).
    """
    cfg.check()
    anchors = np.asarray(anchors, dtype=np.int64)
    if cfg.per_anchor == 0 or len(anchors) == 0:
        return MinedPositives.empty()
    m = min(cfg.neighbours, neighbour_ids.shape[1])
    nb = neighbour_ids[:, :m]
    mutual_all = mutual_neighbours(nb)
    parts = []
    for c0 in range(0, len(anchors), CHUNK_ANCHORS):
        part = _mine_chunk(anchors[c0:c0 + CHUNK_ANCHORS], mutual_all, nb, neighbour_scores,
                           cfg, m, groups, vectors, cluster_assign, near_duplicate_threshold)
        parts.append(replace(part, rows=part.rows + c0))
    if len(parts) == 1:
        return parts[0]
    return MinedPositives(*(np.concatenate([getattr(p, f.name) for p in parts])
                            for f in fields(MinedPositives)))


# anchors mined at a time: a chunk's temporaries are ~100 bytes per anchor and neighbour
# (every anchor at once made the peak of mine's plan at 1M rows: docs/benchmarks.md)
CHUNK_ANCHORS = 131_072


def _mine_chunk(anchors: np.ndarray, mutual_all: np.ndarray, nb: np.ndarray,
                neighbour_scores: np.ndarray, cfg: PositiveConfig, m: int,
                groups: np.ndarray | None, vectors: np.ndarray | None,
                cluster_assign: np.ndarray | None,
                near_duplicate_threshold: float | None) -> MinedPositives:
    """:func:`mine_positives` of the anchors ``anchors`` (rows relative to them): every
    step after the store-wide mutual test is per anchor."""
    mutual = mutual_all[anchors]
    cand = np.where(mutual, nb[anchors], -1)
    cand_scores = np.where(mutual, neighbour_scores[anchors, :m], np.nan).astype(np.float32)
    ranks = np.broadcast_to(np.arange(m), cand.shape)
    if cluster_assign is not None and len(cluster_assign):
        safe = np.maximum(cand, 0)
        agree = np.zeros(cand.shape, dtype=np.float32)
        for run in cluster_assign:
            agree += run[anchors][:, None] == run[safe]
        conf = agree / len(cluster_assign)
    else:
        conf = (1.0 - ranks / m).astype(np.float32)
    reason = np.full(cand.shape, REASONS[1], dtype=object)
    if groups is None and near_duplicate_threshold is not None:
        dup = (cand >= 0) & (np.nan_to_num(cand_scores, nan=-2.0) >= near_duplicate_threshold)
        reason[dup] = REASONS[0]
        conf = np.where(dup, 1.0, conf)
    rows = [np.repeat(np.arange(len(anchors)), m).reshape(len(anchors), m)]
    parts_ids, parts_scores, parts_conf = [cand], [cand_scores], [conf.astype(np.float32)]
    parts_reason = [reason]
    if groups is not None:
        g_rows, g_ids, g_scores = _group_mates(anchors, groups, vectors, cfg.per_anchor)
        rows.append(g_rows[:, None])
        parts_ids.append(g_ids[:, None])
        parts_scores.append(g_scores[:, None])
        parts_conf.append(np.ones((len(g_ids), 1), np.float32))
        parts_reason.append(np.full((len(g_ids), 1), REASONS[0], dtype=object))
    row = np.concatenate([r.reshape(-1) for r in rows])
    ids = np.concatenate([p.reshape(-1) for p in parts_ids])
    scores = np.concatenate([p.reshape(-1) for p in parts_scores])
    conf_all = np.concatenate([p.reshape(-1) for p in parts_conf])
    reasons = np.concatenate([p.reshape(-1) for p in parts_reason])
    keep = ids >= 0
    row, ids, scores, conf_all, reasons = (a[keep] for a in (row, ids, scores, conf_all,
                                                              reasons))
    # one entry per (anchor, id): a group mate that is also a mutual neighbour is a
    # near-duplicate (listed first); then strongest first, at most per_anchor each
    strength = np.where(reasons == REASONS[0], 0, 1)
    order = np.lexsort((-scores, strength, ids, row))
    row, ids, scores, conf_all, reasons, strength = (
        a[order] for a in (row, ids, scores, conf_all, reasons, strength))
    first = np.ones(len(ids), dtype=bool)
    first[1:] = (row[1:] != row[:-1]) | (ids[1:] != ids[:-1])
    row, ids, scores, conf_all, reasons, strength = (
        a[first] for a in (row, ids, scores, conf_all, reasons, strength))
    order = np.lexsort((-scores, -conf_all, strength, row))  # groups, confidence, score
    row, ids, scores, conf_all, reasons = (a[order] for a in (row, ids, scores, conf_all,
                                                               reasons))
    start = np.searchsorted(row, row, side="left")
    keep = (np.arange(len(row)) - start) < cfg.per_anchor
    return MinedPositives(row[keep], ids[keep], scores[keep].astype(np.float32),
                          conf_all[keep].astype(np.float32), reasons[keep])


def _group_mates(anchors: np.ndarray, groups: np.ndarray, vectors: np.ndarray | None,
                 cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, ids, scores) of every anchor's near-duplicate group mates (at most ``cap``
    per anchor, by id); scores are cosines when ``vectors`` are given, else 1."""
    g = groups[anchors]
    in_group = np.flatnonzero(groups >= 0)
    if len(in_group) == 0 or not (g >= 0).any():
        e = np.zeros(0, dtype=np.int64)
        return e, e, np.zeros(0, np.float32)
    order = in_group[np.argsort(groups[in_group], kind="stable")]
    sorted_groups = groups[order]
    rows_out, ids_out = [], []
    for r in np.flatnonzero(g >= 0):
        lo, hi = np.searchsorted(sorted_groups, [g[r], g[r] + 1])
        mates = order[lo:hi]
        mates = mates[mates != anchors[r]][:cap]
        rows_out.append(np.full(len(mates), r, dtype=np.int64))
        ids_out.append(mates)
    rows = np.concatenate(rows_out) if rows_out else np.zeros(0, np.int64)
    ids = np.concatenate(ids_out).astype(np.int64) if ids_out else np.zeros(0, np.int64)
    if vectors is None or len(ids) == 0:
        return rows, ids, np.ones(len(ids), np.float32)
    scores = np.einsum("nd,nd->n", np.asarray(vectors[anchors[rows]], np.float32),
                       np.asarray(vectors[ids], np.float32))
    return rows, ids, scores.astype(np.float32)
