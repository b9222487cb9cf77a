"""Whether a run's training pairs can have any negative at all: its mined negatives
(padding and flagged false negatives are none) and its in-batch candidates (another pair's
positive, or with ``--symmetric`` any other view, of a group that is neither of the pair's
own nor known from the table to be the same thing: :mod:`pairkit.train.exclusions`).

Without one the contrastive loss is identically 0: a run of one source under
``instance``, one label under ``label``, a ``--val-fraction`` that leaves one source to
train on, or a table whose every candidate was flagged. Such a run is refused, as a
validation side of fewer than 2 groups is (:func:`pairkit.train.run_pairs.check_val_groups`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pairkit.core.unique import unique_rows
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    from pairkit.train.config import TrainConfig
    from pairkit.train.data import PairArrays
    from pairkit.train.positives import PositiveSets


def has_mined_negative(pairs: PairArrays) -> bool:
    """Whether some example has a mined negative that takes part in the loss as one (not
    padding, not its own anchor or positive, not an attracted false negative)."""
    n = pairs.negatives
    ok = ((n >= 0) & (n != pairs.anchor[:, None]) & (n != pairs.positive[:, None])
          & ~pairs.neg_attract)
    return bool(ok.any())


def has_in_batch_negative(pairs: PairArrays, groups: np.ndarray, excluded: np.ndarray | None,
                          mined: PositiveSets | None, symmetric: bool) -> bool:
    """Whether some example's in-batch candidates can hold a negative: a candidate group
    (the examples' positives', their anchors' with ``symmetric``, the mined positives')
    other than the example's two groups and not excluded with either (``excluded``: the
    sorted keys ``g * n_groups + h`` of :func:`pairkit.train.exclusions.excluded_keys`).
    Vectorised over the distinct (anchor group, positive group) pairs."""
    if len(pairs) < 2:
        return False
    ga, gp = groups[pairs.anchor], groups[pairs.positive]
    parts = [gp, ga] if symmetric else [gp]
    if mined is not None and mined.total:
        parts.append(groups[mined.ids.astype(np.int64)])
    cand = np.unique(np.concatenate(parts))
    rows = unique_rows(np.stack([ga, gp], axis=1))[0]
    ra, rp = rows[:, 0], rows[:, 1]
    # the candidate groups each row can take before the exclusions
    free = len(cand) - np.isin(ra, cand) - (np.isin(rp, cand) & (rp != ra))
    if excluded is None or not len(excluded):
        return bool((free > 0).any())
    n = int(groups.max()) + 1
    owner = excluded // n
    degree = np.bincount(owner, minlength=n)
    # more free groups than the row's groups have exclusions at all: some is no exclusion
    if (free > degree[ra] + np.where(rp != ra, degree[rp], 0)).any():
        return True
    left = np.flatnonzero(free > 0)
    if not len(left):
        return False
    # the rest (small stores): count each row's distinct excluded candidate groups
    lo = np.searchsorted(excluded, np.concatenate([ra[left], rp[left]]) * n)
    hi = np.searchsorted(excluded, (np.concatenate([ra[left], rp[left]]) + 1) * n)
    counts = hi - lo
    row = np.repeat(np.concatenate([left, left]), counts)
    at = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) \
        + np.arange(int(counts.sum()))
    partner = excluded[at] % n
    keep = np.isin(partner, cand) & (partner != ra[row]) & (partner != rp[row])
    pairs_out = unique_rows(np.stack([row[keep], partner[keep]], axis=1))[0]
    taken = np.bincount(pairs_out[:, 0], minlength=len(rows)) if len(pairs_out) else \
        np.zeros(len(rows), np.int64)
    return bool((taken[left] < free[left]).any())


def check_train_negatives(pairs: PairArrays, groups: np.ndarray, excluded: np.ndarray | None,
                          mined: PositiveSets | None, cfg: TrainConfig, relation: str,
                          from_table: bool) -> None:
    """PairkitError in one line when no training example can have a negative
    (:func:`has_mined_negative`, :func:`has_in_batch_negative`): the loss would be 0 and
    the gap undefined."""
    if has_mined_negative(pairs) or has_in_batch_negative(
            pairs, groups, excluded, mined, cfg.loss.symmetric):
        return
    used = np.concatenate([pairs.anchor, pairs.positive])
    g = len(np.unique(groups[used]))
    held = (f", --val-fraction {cfg.val_fraction:g} holding out the rest: lower it"
            if cfg.val_fraction > 0 else "")
    side = f"{g} {relation} group{'' if g == 1 else 's'}"
    if not from_table:
        more = "sources" if relation == "instance" else "labels"
        why = f"{side} on the training side{held or f': the store needs 2 or more {more}'}"
    elif g < 2:
        why = (f"every mined negative is padding or a flagged false negative, and the "
               f"pairs hold {side}{held}")
    else:
        why = (f"every mined negative is padding or a flagged false negative, and the "
               f"pairs' {side} are all known to be the same thing (mined positives, "
               f"flagged false negatives){held}")
    raise PairkitError(f"training needs 2 or more positive groups: its pairs have no "
                       f"negative ({why})")
