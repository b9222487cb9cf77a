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
NEAR_DUPLICATE, MUTUAL = 0, 1  # their codes (MinedPositives.codes)
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


def capped_neighbours(cfg: PositiveConfig, sources: np.ndarray) -> PositiveConfig:
    """``cfg`` with ``neighbours`` at most the store's sources less one (deeper lists only
    pad: a source's lists hold other sources' rows, and at that depth every source is
    every other's neighbour; the mutual-neighbour rule's guard then turns it off)."""
    n_sources = int(sources.max()) + 1 if len(sources) else 1
    most = max(1, n_sources - 1)
    return cfg if cfg.neighbours <= most else replace(cfg, neighbours=most)


@dataclass(frozen=True)
class MinedPositives:
    """Flat lists, ordered by anchor row, then strongest first: ``rows`` index into the
    anchors, ``ids`` item ids, ``scores`` cosine to the anchor, ``confidence`` in [0, 1],
    ``codes`` uint8 index of the reason in :data:`REASONS` (``reasons``: the names). All
    (m,). Within an anchor: near-duplicates first, then by confidence, then by score."""

    rows: np.ndarray
    ids: np.ndarray
    scores: np.ndarray
    confidence: np.ndarray
    codes: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def reasons(self) -> np.ndarray:
        """(m,) object: the reason names (one byte a row in ``codes`` until asked for:
        an object array costs eight, and building one per chunk held ~50 MB at 200k rows)."""
        return reason_names(self.codes)

    def counts(self) -> dict[str, int]:
        """Rows per reason, in :data:`REASONS` order, the reasons with none left out."""
        found = np.bincount(self.codes, minlength=len(REASONS))
        return {r: int(c) for r, c in zip(REASONS, found, strict=False) if c}

    def subset(self, keep: np.ndarray) -> MinedPositives:
        """The rows where bool ``keep`` (m,) holds, in order."""
        return MinedPositives(*(getattr(self, f.name)[keep] for f in fields(self)))

    @classmethod
    def empty(cls) -> MinedPositives:
        e = np.zeros(0, dtype=np.int64)
        return cls(e, e, np.zeros(0, np.float32), np.zeros(0, np.float32),
                   np.zeros(0, dtype=np.uint8))


def reason_names(codes: np.ndarray) -> np.ndarray:
    """(m,) object array of the :data:`REASONS` names of uint8 ``codes``."""
    return np.asarray(REASONS, dtype=object)[np.asarray(codes, dtype=np.intp)]


MUTUAL_CHUNK_CELLS = 1 << 22  # (rows x m x m) entries compared at a time


def mutual_neighbours(ids: np.ndarray) -> np.ndarray:
    """(N, m) bool: ``ids[i, r]`` is a row whose own list ``ids[j]`` holds ``i``.

    ``ids`` (N, m) int64: every row's nearest rows (-1 padded). Each row's list is looked
    up in its neighbours' lists, :data:`MUTUAL_CHUNK_CELLS` list entries at a time: memory
    stays a few tens of MB at any N (sorting the N x m edge keys, as this did before, held
    about seven N x m int64 arrays at once: ~0.5 GB at 1M rows, m = 10).
    """
    n, m = ids.shape
    found = np.zeros((n, m), dtype=bool)
    if n == 0 or m == 0:
        return found
    step = max(1, MUTUAL_CHUNK_CELLS // (m * m))
    for lo in range(0, n, step):
        block = ids[lo:lo + step]
        back = ids[np.maximum(block, 0)]  # (b, m, m): the lists of each row's neighbours
        here = np.arange(lo, lo + len(block), dtype=ids.dtype)[:, None, None]
        found[lo:lo + step] = (block >= 0) & (back == here).any(axis=2)
    return found


def mine_positives(anchors: np.ndarray, neighbour_ids: np.ndarray,
                   neighbour_scores: np.ndarray, cfg: PositiveConfig, *,
                   groups: np.ndarray | None = None, vectors: np.ndarray | None = None,
                   cluster_assign: np.ndarray | None = None,
                   near_duplicate_threshold: float | None = None,
                   sources: np.ndarray | None = None) -> MinedPositives:
    """The mined positives of ``anchors`` (n,) item ids.

    ``neighbour_ids``/``neighbour_scores`` (N, m >= cfg.neighbours): every row's nearest
    rows of other sources, best first (-1 padded), as
    :func:`pairkit.mine.fn_context.knn_neighbours` gives them; ``groups`` (N,) the
    near-duplicate group per item (-1: none); ``vectors`` (N, d) normalised, for the
    scores of group mates; ``cluster_assign`` (G, N) the consensus runs of the cluster
    rule (confidence), or None. ``near_duplicate_threshold``: without ``groups``, a mutual
    neighbour at least this similar is a ``near_duplicate`` (confidence 1). ``sources``
    (N,): a group mate of the anchor's own source (its other view) is no mined positive
    (None: every item its own source).
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
                           cfg, m, groups, vectors, cluster_assign, near_duplicate_threshold,
                           sources)
        parts.append(replace(part, rows=part.rows + c0))
    if len(parts) == 1:
        return parts[0]
    return MinedPositives(*(np.concatenate([getattr(p, f.name) for p in parts])
                            for f in fields(MinedPositives)))


# anchors mined at a time: a chunk's temporaries are ~100 bytes per anchor and neighbour
# (every anchor at once made the peak of mine's plan at 1M rows: docs/benchmarks.md)
CHUNK_ANCHORS = 32_768


def _mine_chunk(anchors: np.ndarray, mutual_all: np.ndarray, nb: np.ndarray,
                neighbour_scores: np.ndarray, cfg: PositiveConfig, m: int,
                groups: np.ndarray | None, vectors: np.ndarray | None,
                cluster_assign: np.ndarray | None,
                near_duplicate_threshold: float | None,
                sources: np.ndarray | None = None) -> MinedPositives:
    """:func:`mine_positives` of the anchors ``anchors`` (rows relative to them): every
    step after the store-wide mutual test is per anchor."""
    mutual = mutual_all[anchors]
    listed, listed_scores = nb[anchors], neighbour_scores[anchors, :m]
    dup = np.zeros(listed.shape, dtype=bool)
    if groups is None and near_duplicate_threshold is not None:
        # without the store-wide groups, a listed neighbour at the threshold is a
        # near-duplicate, mutual or not (in a group larger than the lists, ties fill them
        # and most mates are not mutual); the rule compares the same pairs the same way
        dup = (listed >= 0) & (np.nan_to_num(listed_scores, nan=-2.0)
                               >= near_duplicate_threshold)
    take = mutual | dup
    cand = np.where(take, listed, -1)
    cand_scores = np.where(take, listed_scores, np.nan).astype(np.float32)
    ranks = np.broadcast_to(np.arange(m), cand.shape)
    if cluster_assign is not None and len(cluster_assign):
        safe = np.maximum(cand, 0)
        agree = np.zeros(cand.shape, dtype=np.float32)
        for run in cluster_assign:
            agree += run[anchors][:, None] == run[safe]
        conf = agree / len(cluster_assign)
    else:
        conf = (1.0 - ranks / m).astype(np.float32)
    reason = np.full(cand.shape, MUTUAL, dtype=np.uint8)
    reason[dup] = NEAR_DUPLICATE
    conf = np.where(dup, 1.0, conf)
    rows = [np.repeat(np.arange(len(anchors)), m).reshape(len(anchors), m)]
    parts_ids, parts_scores, parts_conf = [cand], [cand_scores], [conf.astype(np.float32)]
    parts_reason = [reason]
    if groups is not None:
        g_rows, g_ids, g_scores = _group_mates(anchors, groups, vectors, cfg.per_anchor,
                                               sources)
        rows.append(g_rows[:, None])
        parts_ids.append(g_ids[:, None])
        parts_scores.append(g_scores[:, None])
        parts_conf.append(np.ones((len(g_ids), 1), np.float32))
        parts_reason.append(np.full((len(g_ids), 1), NEAR_DUPLICATE, dtype=np.uint8))
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
    order = np.lexsort((-scores, reasons, ids, row))  # near-duplicates (code 0) first
    row, ids, scores, conf_all, reasons = (
        a[order] for a in (row, ids, scores, conf_all, reasons))
    first = np.ones(len(ids), dtype=bool)
    first[1:] = (row[1:] != row[:-1]) | (ids[1:] != ids[:-1])
    row, ids, scores, conf_all, reasons = (
        a[first] for a in (row, ids, scores, conf_all, reasons))
    order = np.lexsort((-scores, -conf_all, reasons, row))  # groups, confidence, score
    row, ids, scores, conf_all, reasons = (a[order] for a in (row, ids, scores, conf_all,
                                                               reasons))
    start = np.searchsorted(row, row, side="left")
    keep = (np.arange(len(row)) - start) < cfg.per_anchor
    return MinedPositives(row[keep], ids[keep], scores[keep].astype(np.float32),
                          conf_all[keep].astype(np.float32), reasons[keep])


def _group_mates(anchors: np.ndarray, groups: np.ndarray, vectors: np.ndarray | None,
                 cap: int, sources: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, ids, scores) of every anchor's near-duplicate group mates of other sources
    (at most ``cap`` per anchor, by id); scores are cosines when ``vectors`` are given,
    else 1."""
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
        mates = mates[(mates != anchors[r]) if sources is None
                      else (sources[mates] != sources[anchors[r]])][:cap]
        rows_out.append(np.full(len(mates), r, dtype=np.int64))
        ids_out.append(mates)
    rows = np.concatenate(rows_out) if rows_out else np.zeros(0, np.int64)
    ids = np.concatenate(ids_out).astype(np.int64) if ids_out else np.zeros(0, np.int64)
    if vectors is None or len(ids) == 0:
        return rows, ids, np.ones(len(ids), np.float32)
    scores = np.einsum("nd,nd->n", np.asarray(vectors[anchors[rows]], np.float32),
                       np.asarray(vectors[ids], np.float32))
    return rows, ids, scores.astype(np.float32)
