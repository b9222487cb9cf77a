"""What a pair's in-batch candidates must not count as negatives beyond its own groups:
the items the table says are the same thing as the anchor (its mined positives, its
flagged false negatives, eliminated or attracted). In a batch they show up as other pairs'
anchors or positives; the masks of :mod:`pairkit.train.losses.candidates` leave them out.

Known by group: a key ``group(a) * n_groups + group(x)`` per (anchor, item) pair, both
ways, in one sorted array; a batch's is a table of its distinct groups (:func:`batch_table`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pairkit.train.positives import PositiveSets


def excluded_keys(groups: np.ndarray, mined: PositiveSets | None,
                  flagged_pairs: np.ndarray | None) -> np.ndarray | None:
    """Sorted unique keys of the (anchor group, item group) pairs, both ways, for every
    mined positive and flagged pair; None when there are none."""
    parts = []
    if mined is not None and mined.total:
        parts.append(np.stack([mined.anchors, mined.ids.astype(np.int64)], axis=1))
    if flagged_pairs is not None and len(flagged_pairs):
        parts.append(np.asarray(flagged_pairs, dtype=np.int64))
    if not parts:
        return None
    pairs = groups[np.concatenate(parts)]
    n = int(groups.max()) + 1
    keys = np.concatenate([pairs[:, 0] * n + pairs[:, 1], pairs[:, 1] * n + pairs[:, 0]])
    return np.unique(keys)


def batch_table(keys: np.ndarray, groups: np.ndarray, anchor_groups: np.ndarray,
                positive_groups: np.ndarray, negative_groups: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(table, index)`` of a batch of B pairs: its U distinct groups' (U, U) table of
    known same-thing pairs, and the (2B,) index into it of every view (the anchors, then
    the positives), then, given ``negative_groups`` (B K,) (supcon: every feature is a
    candidate of every other), of every mined negative: (2B + B K,). Looks up only those
    groups' key ranges: a batch of 4,096 pairs costs a few thousand searches, not one per
    cell (:meth:`pairkit.train.losses.candidates.PairGroups.excluded` expands it on the
    device)."""
    n = int(groups.max()) + 1
    parts = [anchor_groups, positive_groups]
    if negative_groups is not None:
        parts.append(negative_groups)
    views = np.concatenate(parts).astype(np.int64)
    present, index = np.unique(views, return_inverse=True)
    lo = np.searchsorted(keys, present * n)
    counts = np.searchsorted(keys, (present + 1) * n) - lo
    table = np.zeros((len(present), len(present)), dtype=bool)
    if counts.sum():
        at = np.repeat(lo - np.cumsum(np.concatenate([[0], counts[:-1]])), counts) + \
            np.arange(int(counts.sum()))
        partner = keys[at] % n
        owner = np.repeat(np.arange(len(present)), counts)
        where = np.minimum(np.searchsorted(present, partner), len(present) - 1)
        inside = present[where] == partner
        table[owner[inside], where[inside]] = True
    return table, index.reshape(-1)

