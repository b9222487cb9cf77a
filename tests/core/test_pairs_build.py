"""Pair tables built from hand-written mining results."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.pairs import LABELED_PAIR_COLUMNS, TRIPLET_COLUMNS, MinedPairs, build_pair_table
from pairkit.errors import UsageError

PATHS = np.array([f"p{i}.jpg" for i in range(8)], dtype=object)


def mined(attract: bool = False) -> MinedPairs:
    m = MinedPairs(
        anchors=np.array([0, 3]), positives=np.array([1, 2]),
        pos_scores=np.array([0.9, 0.8], np.float32),
        neg_ids=np.array([[4, 5], [6, -1]]),
        neg_scores=np.array([[0.5, 0.4], [0.3, np.nan]], np.float32),
        neg_ranks=np.array([[0, 1], [2, -1]]),
        neg_flags=np.array([[False, True], [False, False]]),
        neg_reasons=np.array([[None, "label|cluster"], [None, None]], dtype=object),
    )
    if attract:
        m.fn_rows, m.fn_ids = np.array([1]), np.array([7])
        m.fn_scores, m.fn_ranks = np.array([0.7], np.float32), np.array([-1])
        m.fn_reasons = np.array(["near_duplicate"], dtype=object)
    return m


def test_triplet() -> None:
    df = build_pair_table(mined(), "triplet", "abc", PATHS)
    assert tuple(df.columns) == TRIPLET_COLUMNS
    assert df[["anchor_id", "positive_id", "negative_id", "neg_rank"]].values.tolist() == [
        [0, 1, 4, 0], [0, 1, 5, 1], [3, 2, 6, 2]]
    assert df["negative_path"].tolist() == ["p4.jpg", "p5.jpg", "p6.jpg"]
    assert df["neg_score"].tolist() == pytest.approx([0.5, 0.4, 0.3])
    flagged = build_pair_table(mined(), "triplet", "abc", PATHS, flag_columns=True)
    assert flagged["false_negative"].tolist() == [False, True, False]
    assert flagged["fn_reason"].tolist() == [None, "label|cluster", None]


def test_attract_rows() -> None:
    t = build_pair_table(mined(True), "triplet", "abc", PATHS)
    assert t["negative_id"].tolist() == [4, 5, 6, 7]
    assert t["false_negative"].tolist() == [False, True, False, True]
    lp = build_pair_table(mined(True), "labeled-pair", "abc", PATHS)
    assert tuple(lp.columns) == (*LABELED_PAIR_COLUMNS, "false_negative", "fn_reason")
    assert lp[["anchor_id", "other_id", "label"]].values.tolist() == [
        [0, 1, 1], [0, 4, 0], [0, 5, 0], [3, 2, 1], [3, 6, 0], [3, 7, 1]]
    nt = build_pair_table(mined(True), "n-tuple", "abc", PATHS)
    assert nt["anchor_id"].tolist() == [0, 3, 3]
    assert nt["negative_id_1"].tolist() == [4, 6, 7]
    assert nt["false_negative"].tolist() == [True, False, True]


def test_n_tuple_padding() -> None:
    nt = build_pair_table(mined(), "n-tuple", "abc", PATHS)
    assert list(nt.columns[:6]) == ["store_id", "anchor_id", "positive_id", "anchor_path",
                                    "positive_path", "pos_score"]
    assert nt["negative_id_2"].tolist() == [5, -1]
    assert nt["negative_path_2"].tolist() == ["p5.jpg", None]
    assert np.isnan(nt["neg_score_2"].iloc[1])
    with pytest.raises(UsageError, match="--format must be one of"):
        build_pair_table(mined(), "quad", "abc", PATHS)
