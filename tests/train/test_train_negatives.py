"""Whether training pairs can have a negative (hunt-q 1), on hand-made groups."""

from __future__ import annotations

import numpy as np

from pairkit.train.data import PairArrays
from pairkit.train.train_negatives import has_in_batch_negative, has_mined_negative


def pairs_of(rows: list[tuple[int, int]], negatives: list[list[int]] | None = None,
             attract: list[list[bool]] | None = None) -> PairArrays:
    a = np.array([r[0] for r in rows], np.int64)
    p = np.array([r[1] for r in rows], np.int64)
    n = np.array(negatives if negatives is not None else [[]] * len(rows), np.int64)
    n = n.reshape(len(rows), -1)
    att = np.array(attract, bool) if attract is not None else np.zeros(n.shape, bool)
    return PairArrays(a, p, n, att)


GROUPS = np.array([0, 0, 1, 1, 2, 2])  # rows 0-1 group 0, 2-3 group 1, 4-5 group 2


def keys(*pairs: tuple[int, int]) -> np.ndarray:
    """Both ways, as pairkit.train.exclusions.excluded_keys gives them (3 groups)."""
    return np.unique([g * 3 + h for a, b in pairs for g, h in ((a, b), (b, a))])


def test_in_batch_negatives_by_hand() -> None:
    two = pairs_of([(0, 1), (2, 3)])
    # groups 0 and 1: each pair's positive is the other's negative
    assert has_in_batch_negative(two, GROUPS, None, None, symmetric=False)
    # one group: none
    assert not has_in_batch_negative(pairs_of([(0, 1), (1, 0)]), GROUPS, None, None, False)
    # groups 0 and 1 known to be the same thing: none (the exact count)
    assert not has_in_batch_negative(two, GROUPS, keys((0, 1)), None, False)
    # a third group, not excluded: a negative (the count bound: 2 free groups, 1 exclusion)
    three = pairs_of([(0, 1), (2, 3), (4, 5)])
    assert has_in_batch_negative(three, GROUPS, keys((0, 1)), None, False)
    # ... excluded with both: none
    assert not has_in_batch_negative(three, GROUPS, keys((0, 1), (0, 2), (1, 2)), None, False)
    # ... excluded with 0 only: the pairs of group 1 and 2 are each other's negatives
    assert has_in_batch_negative(three, GROUPS, keys((0, 1), (0, 2)), None, False)


def test_a_pairs_own_groups_excluded_with_each_other_leave_the_others_free() -> None:
    """Pairs (0 -> 2) and (4 -> 6) of groups (0, 1) and (2, 3), each pair's own two groups
    known to be the same thing (a mined positive across groups): group 3 is still a
    negative of the first pair. An exclusion with the pair's own group takes no candidate
    away (hunt 3b: counting it refused this run)."""
    groups = np.repeat(np.arange(4), 2)
    own = np.unique([0 * 4 + 1, 1 * 4 + 0, 2 * 4 + 3, 3 * 4 + 2])
    pairs = pairs_of([(0, 2), (4, 6)])
    assert has_in_batch_negative(pairs, groups, own, None, symmetric=False)
    # group 3 excluded with group 0, and group 1 with group 2: none left
    both = np.unique(np.concatenate([own, [0 * 4 + 3, 3 * 4 + 0, 1 * 4 + 2, 2 * 4 + 1]]))
    assert not has_in_batch_negative(pairs, groups, both, None, symmetric=False)


def test_symmetric_candidates_include_the_anchors() -> None:
    """Anchor 2 (group 1) with positive 0 (group 0), anchor 1 with positive 0: the
    positives are all of group 0, so only the symmetric loss, whose candidates are every
    view, sees group 1 as a negative of the group-0 pair."""
    pairs = pairs_of([(2, 0), (1, 0)])
    assert not has_in_batch_negative(pairs, GROUPS, None, None, symmetric=False)
    assert has_in_batch_negative(pairs, GROUPS, None, None, symmetric=True)


def test_mined_negatives_by_hand() -> None:
    assert has_mined_negative(pairs_of([(0, 1)], [[2, -1]]))
    assert not has_mined_negative(pairs_of([(0, 1)], [[-1, -1]]))  # padding
    assert not has_mined_negative(pairs_of([(0, 1)], [[2]], [[True]]))  # attracted
    assert not has_mined_negative(pairs_of([(0, 1)], [[0, 1]]))  # its own anchor, positive
