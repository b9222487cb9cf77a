"""Mined positives in training: read them from a pair table, draw one per example each epoch.

``pairkit mine`` writes mined positives as extra rows of a triplet or n-tuple table
with ``positive_kind = "mined"`` (docs/formats.md). Training keeps every example's view
positive and, each epoch, swaps it for one of the anchor's mined positives in a share
of the examples (``--positive-share``): the anchor is pulled towards another view of
itself half of the time and towards a neighbour the rules judge to be the same thing
the other half, as NNCLR (Dwibedi et al. ICCV 2021) does with its support-set
neighbours. Measured against using every mined positive at once (a multi-positive
InfoNCE denominator) and against only mined positives: docs/benchmarks.md, "Downstream".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pairkit.core.unique import unique_rows
from pairkit.errors import PairkitError
from pairkit.train.data import PairArrays

if TYPE_CHECKING:
    import pandas as pd

KIND_COLUMN = "positive_kind"
MINED = "mined"
SAMPLINGS = ("uniform", "confidence")
MINED_VIEWS = ("random", "row")  # train --mined-view


@dataclass(frozen=True)
class PositiveSets:
    """Mined positives of every store item, as CSR over item ids: the positives of item
    ``a`` are ``ids[offsets[a]:offsets[a + 1]]`` with ``confidence`` alike."""

    offsets: np.ndarray  # (N + 1,) int64
    ids: np.ndarray  # (M,) int64
    confidence: np.ndarray  # (M,) float32 in [0, 1]

    @property
    def total(self) -> int:
        return len(self.ids)

    @property
    def anchors(self) -> np.ndarray:
        """(M,) int64: the item each entry of ``ids`` is a mined positive of."""
        counts = np.diff(self.offsets)
        return np.repeat(np.arange(len(counts), dtype=np.int64), counts)

    def counts(self, anchors: np.ndarray) -> np.ndarray:
        """(n,) int64: how many mined positives each of ``anchors`` has."""
        return (self.offsets[anchors + 1] - self.offsets[anchors]).astype(np.int64)


def split_mined_rows(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(rows with view positives, rows with mined positives or None) of a pair table."""
    if KIND_COLUMN not in table.columns:
        return table, None
    kind = table[KIND_COLUMN].astype("string").str.strip().str.lower()
    bad = ~kind.isin(["view", MINED]) & kind.notna()
    if bool(bad.any()):
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise PairkitError(f"pair table: column {KIND_COLUMN} must be 'view' or 'mined', got "
                           f"{table[KIND_COLUMN].iloc[row]!r} (row {row})")
    mined = (kind == MINED).fillna(False).to_numpy(dtype=bool)
    if not mined.any():
        return table, None
    return table[~mined].reset_index(drop=True), table[mined].reset_index(drop=True)


def positive_sets(mined: pd.DataFrame, store_count: int, allowed: np.ndarray) -> PositiveSets:
    """The mined rows of a table as :class:`PositiveSets` over ``store_count`` items.

    Rows whose anchor or positive is not ``allowed`` (bool (N,): the training side of a
    validation split) are left out; ids out of range raise PairkitError.
    """
    import pandas as pd

    anchor = pd.to_numeric(mined["anchor_id"], errors="coerce")
    positive = pd.to_numeric(mined["positive_id"], errors="coerce")
    for name, col in (("anchor_id", anchor), ("positive_id", positive)):
        bad = col.isna() | (col != col.round()) | (col < 0) | (col >= store_count)
        if bool(bad.any()):
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise PairkitError(f"pair table: mined positive row {row} has {name} "
                               f"{mined[name].iloc[row]!r}, not an id of this store's "
                               f"{store_count} items")
    a = anchor.to_numpy(dtype=np.int64)
    p = positive.to_numpy(dtype=np.int64)
    if "positive_confidence" in mined.columns:
        conf = pd.to_numeric(mined["positive_confidence"], errors="coerce").to_numpy(
            dtype=np.float64)
        conf = np.clip(np.nan_to_num(conf, nan=1.0), 0.0, 1.0).astype(np.float32)
    else:
        conf = np.ones(len(a), np.float32)
    keep = allowed[a] & allowed[p] & (a != p)
    a, p, conf = a[keep], p[keep], conf[keep]
    # one entry per (anchor, positive)
    key = unique_rows(np.stack([a, p], axis=1))[1]
    a, p, conf = a[key], p[key], conf[key]
    order = np.argsort(a, kind="stable")
    a, p, conf = a[order], p[order], conf[order]
    offsets = np.zeros(store_count + 1, dtype=np.int64)
    np.add.at(offsets, a + 1, 1)
    return PositiveSets(np.cumsum(offsets), p, conf)


def draw_positives(sets: PositiveSets, anchors: np.ndarray, rng: np.random.Generator,
                   sampling: str = "uniform") -> np.ndarray:
    """(n,) int64: one mined positive per anchor (-1 for anchors without any), drawn
    uniformly or in proportion to the confidence."""
    if sampling not in SAMPLINGS:
        raise PairkitError(f"--positive-sampling must be one of {', '.join(SAMPLINGS)}, "
                           f"got {sampling}")
    counts = sets.counts(anchors)
    out = np.full(len(anchors), -1, dtype=np.int64)
    has = counts > 0
    if not has.any():
        return out
    start = sets.offsets[anchors[has]]
    n = counts[has]
    if sampling == "uniform":
        pick = start + np.floor(rng.random(len(n)) * n).astype(np.int64)
    else:
        # inverse-CDF per anchor over its confidences (all zero: uniform)
        cum = np.cumsum(sets.confidence.astype(np.float64) + 1e-9)
        base = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0.0)
        total = cum[start + n - 1] - base
        target = base + rng.random(len(n)) * total
        pick = np.searchsorted(cum, target, side="right")
        pick = np.clip(pick, start, start + n - 1)
    out[has] = sets.ids[pick]
    return out


@dataclass(frozen=True)
class SourceRows:
    """The store's rows grouped by source: ``order`` lists the rows source by source
    (ascending ids within one), and row r's source has ``count[r]`` rows starting at
    ``order[start[r]]``."""

    order: np.ndarray  # (N,) int64
    start: np.ndarray  # (N,) int64
    count: np.ndarray  # (N,) int64


def source_rows(sources: np.ndarray) -> SourceRows:
    """:class:`SourceRows` of the per-row source codes ``sources`` (N,)."""
    sources = np.asarray(sources)
    order = np.argsort(sources, kind="stable").astype(np.int64)
    ranked = sources[order]
    first = np.searchsorted(ranked, ranked, side="left")
    last = np.searchsorted(ranked, ranked, side="right")
    start = np.empty(len(order), dtype=np.int64)
    count = np.empty(len(order), dtype=np.int64)
    start[order], count[order] = first, last - first
    return SourceRows(order, start, count)


def any_view(rows: np.ndarray, by_source: SourceRows, rng: np.random.Generator
             ) -> np.ndarray:
    """For each of ``rows``, a row of its source drawn uniformly: itself or one of its
    other views (itself when the source has one)."""
    rows = np.asarray(rows, dtype=np.int64)
    u = rng.random(len(rows))
    pick = by_source.start[rows] + np.minimum((u * by_source.count[rows]).astype(np.int64),
                                              by_source.count[rows] - 1)
    return by_source.order[pick]


def swap_positives(pairs: PairArrays, sets: PositiveSets, share: float,
                   rng: np.random.Generator, sampling: str = "uniform",
                   views: SourceRows | None = None) -> PairArrays:
    """``pairs`` with the positive of about ``share`` of the examples (those whose anchor
    has mined positives) replaced by one of the anchor's mined positives; with ``views``,
    by a view of the mined positive's source drawn uniformly (``train --mined-view
    random``: the neighbour seen in another augmentation half of the time, as NNCLR pairs
    a neighbour of one view with the other view)."""
    if not 0 <= share <= 1:
        raise PairkitError(f"--positive-share must be in [0, 1], got {share}")
    if share == 0 or sets.total == 0 or len(pairs) == 0:
        return pairs
    drawn = draw_positives(sets, pairs.anchor, rng, sampling)
    # an example whose positive is already a mined one (a mined-only example) is always
    # drawn anew: kept, it would favour the first of its anchor's mined positives
    swap = (drawn >= 0) & ((rng.random(len(pairs)) < share) | is_mined(pairs, sets))
    if not swap.any():
        return pairs
    if views is not None:
        drawn = np.where(drawn >= 0, any_view(np.maximum(drawn, 0), views, rng), drawn)
    positive = np.where(swap, drawn, pairs.positive)
    return PairArrays(pairs.anchor, positive, pairs.negatives, pairs.neg_attract)


def is_mined(pairs: PairArrays, sets: PositiveSets) -> np.ndarray:
    """(M,) bool: the example's positive is one of its anchor's mined positives."""
    n = max(len(sets.offsets) - 1, 1)
    keys = sets.anchors * n + sets.ids
    ok = pairs.anchor < len(sets.offsets) - 1
    mine = np.where(ok, pairs.anchor, 0).astype(np.int64) * n + pairs.positive
    return ok & np.isin(mine, keys)


def mined_only_examples(sets: PositiveSets, anchors_with_examples: np.ndarray,
                        allowed: np.ndarray) -> PairArrays:
    """One example (anchor, its first mined positive, no negatives) for every allowed item
    that has mined positives but no example of its own (e.g. a store of one view per
    source, where mined positives are the only positives); ``swap_positives`` redraws
    their positive every epoch (:func:`is_mined`)."""
    n = len(sets.offsets) - 1
    has = np.flatnonzero((sets.offsets[1:] > sets.offsets[:-1]) & allowed[:n])
    todo = np.setdiff1d(has, anchors_with_examples)
    pos = sets.ids[sets.offsets[todo]] if len(todo) else np.zeros(0, np.int64)
    m = len(todo)
    return PairArrays(todo.astype(np.int64), pos.astype(np.int64),
                      np.full((m, 0), -1, dtype=np.int64), np.zeros((m, 0), dtype=bool))


def concat_pairs(a: PairArrays, b: PairArrays) -> PairArrays:
    """The examples of ``a`` then ``b`` (negatives padded with -1 to the wider K)."""
    k = max(a.negatives.shape[1], b.negatives.shape[1])

    def pad(p: PairArrays) -> tuple[np.ndarray, np.ndarray]:
        extra = k - p.negatives.shape[1]
        return (np.pad(p.negatives, ((0, 0), (0, extra)), constant_values=-1),
                np.pad(p.neg_attract, ((0, 0), (0, extra)), constant_values=False))

    (na, aa), (nb, ab) = pad(a), pad(b)
    return PairArrays(np.concatenate([a.anchor, b.anchor]),
                      np.concatenate([a.positive, b.positive]),
                      np.concatenate([na, nb]), np.concatenate([aa, ab]))
