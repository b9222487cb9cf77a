"""Mined positives in training: reading them from a table, drawing them (uniform and by
confidence, against expected frequencies), swapping a share of the positives, the
residual head starting as the identity, and a whole run with mined rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.errors import PairkitError
from pairkit.train.data import PairArrays
from pairkit.train.positives import (
    PositiveSets,
    any_view,
    concat_pairs,
    draw_positives,
    mined_only_examples,
    positive_sets,
    source_rows,
    split_mined_rows,
    swap_positives,
)


def _table() -> pd.DataFrame:
    return pd.DataFrame({
        "anchor_id": [0, 0, 0, 0, 1, 2],
        "positive_id": [1, 2, 3, 2, 0, 2],
        "negative_id": [5, None, None, None, None, None],
        "positive_kind": ["view", "mined", "mined", "mined", "mined", "mined"],
        "positive_confidence": [None, 0.9, 0.1, 0.9, 1.0, 1.0],
    })


def test_split_and_sets() -> None:
    views, mined = split_mined_rows(_table())
    assert views["positive_id"].tolist() == [1]
    assert mined is not None and len(mined) == 5
    sets = positive_sets(mined, 6, np.ones(6, bool))
    # anchor 0: 2 and 3 (the repeated 0-2 row once); anchor 1: 0; 2-2 (itself) dropped
    np.testing.assert_array_equal(sets.offsets, [0, 2, 3, 3, 3, 3, 3])
    assert sets.ids.tolist() == [2, 3, 0]
    np.testing.assert_allclose(sets.confidence, [0.9, 0.1, 1.0])
    # the training side of a split: rows touching item 3 are left out
    allowed = np.array([True, True, True, False, True, True])
    assert positive_sets(mined, 6, allowed).ids.tolist() == [2, 0]


def test_tables_without_mined_rows_and_bad_kinds() -> None:
    t = _table().drop(columns="positive_kind")
    assert split_mined_rows(t)[1] is None
    bad = _table()
    bad.loc[2, "positive_kind"] = "maybe"
    with pytest.raises(PairkitError, match="positive_kind must be 'view' or 'mined'.*row 2"):
        split_mined_rows(bad)
    _, mined = split_mined_rows(_table())
    with pytest.raises(PairkitError, match="not an id of this store's 3 items"):
        positive_sets(mined, 3, np.ones(3, bool))


def test_draws_follow_uniform_and_confidence_weights() -> None:
    _, mined = split_mined_rows(_table())
    sets = positive_sets(mined, 6, np.ones(6, bool))
    rng = np.random.default_rng(0)
    anchors = np.zeros(20_000, dtype=np.int64)
    uni = draw_positives(sets, anchors, rng)
    conf = draw_positives(sets, anchors, rng, "confidence")
    # expected shares: uniform 1/2 each; by confidence 0.9 / (0.9 + 0.1) = 0.9
    assert abs((uni == 2).mean() - 0.5) < 0.02
    assert abs((conf == 2).mean() - 0.9) < 0.01
    assert set(np.unique(conf)) == {2, 3}
    none = draw_positives(sets, np.array([2, 5]), rng)
    assert none.tolist() == [-1, -1]


def test_confidence_draw_for_an_anchor_whose_list_does_not_start_at_zero() -> None:
    """Anchor 1's positives sit at CSR offsets 2 and 3 (after anchor 0's two): drawn by
    confidence 0.2 / 0.8, interleaved with anchor 0 (0.5 / 0.5) in one call. Expected
    shares within 4 sigma of 20,000 draws (sigma = sqrt(p(1 - p) / n) <= 0.0036)."""
    sets = PositiveSets(np.array([0, 2, 4, 4]), np.array([10, 11, 20, 21]),
                        np.array([0.5, 0.5, 0.2, 0.8], np.float32))
    rng = np.random.default_rng(1)
    n = 20_000
    anchors = np.tile([0, 1, 2], n)
    got = draw_positives(sets, anchors, rng, "confidence")
    one, zero = got[anchors == 1], got[anchors == 0]
    assert set(np.unique(one)) == {20, 21} and set(np.unique(zero)) == {10, 11}
    assert (got[anchors == 2] == -1).all()
    assert abs((one == 20).mean() - 0.2) < 4 * np.sqrt(0.2 * 0.8 / n)
    assert abs((zero == 10).mean() - 0.5) < 4 * np.sqrt(0.25 / n)


def _swap_case(n: int = 10_000) -> tuple[PositiveSets, PairArrays]:
    """The table's mined positives and ``n`` examples alternating anchor 0 (mined
    positives 2 and 3) and anchor 4 (none)."""
    _, mined = split_mined_rows(_table())
    sets = positive_sets(mined, 6, np.ones(6, bool))
    return sets, PairArrays(np.array([0, 4] * (n // 2)), np.array([1, 5] * (n // 2)),
                            np.full((n, 1), 5), np.zeros((n, 1), bool))


def test_swap_share_and_untouched_examples() -> None:
    sets, pairs = _swap_case()
    out = swap_positives(pairs, sets, 0.5, np.random.default_rng(1))
    swapped = out.positive != pairs.positive
    assert not swapped[1::2].any()  # anchor 4 has no mined positives
    assert abs(swapped[0::2].mean() - 0.5) < 0.03
    assert set(out.positive[0::2][swapped[0::2]]) == {2, 3}
    np.testing.assert_array_equal(out.negatives, pairs.negatives)
    assert swap_positives(pairs, sets, 0.0, np.random.default_rng(1)) is pairs
    with pytest.raises(PairkitError, match=r"--positive-share must be in \[0, 1\], got 1.5"):
        swap_positives(pairs, sets, 1.5, np.random.default_rng(1))


def test_any_view_draws_each_view_of_the_source_equally() -> None:
    # rows 0-5 of sources 7, 3, 7, 9, 3, 3: source 7 has rows 0 and 2, source 3 rows 1, 4
    # and 5, source 9 only row 3
    by_source = source_rows(np.array([7, 3, 7, 9, 3, 3]))
    assert by_source.order.tolist() == [1, 4, 5, 0, 2, 3]
    assert by_source.count.tolist() == [2, 3, 2, 1, 3, 3]
    rng = np.random.default_rng(0)
    n = 30_000
    got = any_view(np.array([2, 4, 3] * n), by_source, rng).reshape(n, 3)
    assert set(got[:, 0]) == {0, 2} and abs((got[:, 0] == 0).mean() - 1 / 2) < 0.01
    assert set(got[:, 1]) == {1, 4, 5}
    for row in (1, 4, 5):
        assert abs((got[:, 1] == row).mean() - 1 / 3) < 0.01
    assert (got[:, 2] == 3).all()  # one view: the row itself


def test_swap_draws_a_view_of_the_mined_positives_source() -> None:
    sets, pairs = _swap_case()
    # sources: items 2 and 5 are two views of one source, 3 is alone
    views = source_rows(np.array([0, 1, 2, 3, 4, 2]))
    out = swap_positives(pairs, sets, 0.5, np.random.default_rng(1), views=views)
    row = swap_positives(pairs, sets, 0.5, np.random.default_rng(1))
    swapped = out.positive != pairs.positive
    # the same examples swapped, and the same mined positive's source: 2 -> 2 or 5
    np.testing.assert_array_equal(swapped, row.positive != pairs.positive)
    drawn_2 = swapped & (row.positive == 2)
    assert set(out.positive[drawn_2]) == {2, 5}
    assert abs((out.positive[drawn_2] == 5).mean() - 0.5) < 0.03
    np.testing.assert_array_equal(out.positive[swapped & (row.positive == 3)], 3)
    assert not swapped[1::2].any()


def test_mined_only_examples_and_concat() -> None:
    _, mined = split_mined_rows(_table())
    sets = positive_sets(mined, 6, np.ones(6, bool))
    extra = mined_only_examples(sets, np.array([0]), np.ones(6, bool))
    assert extra.anchor.tolist() == [1] and extra.positive.tolist() == [0]
    base = PairArrays(np.array([0]), np.array([1]), np.array([[5, 4]]), np.zeros((1, 2), bool))
    both = concat_pairs(base, extra)
    assert both.negatives.tolist() == [[5, 4], [-1, -1]]
    assert both.anchor.tolist() == [0, 1]


def test_a_mined_only_example_draws_its_positive_uniformly() -> None:
    """Found by a bug hunt (2026-12-06): a mined-only example kept its first (lowest-id)
    mined positive whenever it was not swapped: 60% of the epochs instead of 1 / 5."""
    sets = PositiveSets(np.array([0, 5, 5]), np.array([10, 47, 70, 74, 75]),
                        np.ones(5, np.float32))
    only = PairArrays(np.array([0]), np.array([10]), np.full((1, 0), -1), np.zeros((1, 0), bool))
    rng = np.random.default_rng(0)
    got = np.array([int(swap_positives(only, sets, 0.5, rng).positive[0])
                    for _ in range(5000)])
    for p in (10, 47, 70, 74, 75):
        assert abs((got == p).mean() - 0.2) < 0.02, p
    # a view example (its positive not mined) is still swapped about share of the time
    view = PairArrays(np.array([0]), np.array([3]), np.full((1, 0), -1), np.zeros((1, 0), bool))
    kept = np.mean([int(swap_positives(view, sets, 0.5, rng).positive[0]) == 3
                    for _ in range(4000)])
    assert abs(kept - 0.5) < 0.03


def test_residual_head_starts_as_identity() -> None:
    import torch

    from pairkit.train.head import HeadSpec, build_module

    module = build_module(HeadSpec("residual", 6, 6, 4))
    x = torch.randn(3, 6)
    torch.testing.assert_close(module(x), x)
    with pytest.raises(PairkitError, match="residual head keeps the input dim"):
        HeadSpec("residual", 6, 3, 4).check()
