"""Mined positives as rows of a pair table, and back through train's reader."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.pairs import MinedPairs, add_mined_positives, build_pair_table
from pairkit.core.tables import read_table, write_table
from pairkit.train.positives import positive_sets, split_mined_rows

PATHS = np.array([f"p{i}.jpg" for i in range(8)], dtype=object)


def _mined() -> MinedPairs:
    return MinedPairs(
        anchors=np.array([3, 0]), positives=np.array([2, 1]),
        pos_scores=np.array([0.8, 0.9], np.float32),
        neg_ids=np.array([[6, -1], [4, 5]]),
        neg_scores=np.array([[0.3, np.nan], [0.5, 0.4]], np.float32),
        neg_ranks=np.array([[0, -1], [0, 1]]),
    )


def _with_positives(fmt: str):  # noqa: ANN202
    table = build_pair_table(_mined(), fmt, "sid", PATHS)
    # anchor row 1 (item 0) has mined positives 7 and 5; anchor row 0 (item 3) has 4
    return add_mined_positives(
        table, fmt, np.array([3, 0]), rows=np.array([0, 1, 1]), ids=np.array([4, 7, 5]),
        scores=np.array([0.7, 0.6, 0.5], np.float32),
        confidence=np.array([1.0, 0.75, 0.5], np.float32),
        reasons=np.array(["near_duplicate", "mutual_neighbour", "mutual_neighbour"],
                         dtype=object),
        store_id="sid", paths=PATHS)


def test_triplet_rows_grouped_by_anchor_view_rows_first() -> None:
    df = _with_positives("triplet")
    assert df[["anchor_id", "positive_id", "negative_id"]].values.tolist() == [
        [3, 2, 6], [3, 4, -1], [0, 1, 4], [0, 1, 5], [0, 7, -1], [0, 5, -1]]
    assert df["positive_kind"].tolist() == ["view", "mined", "view", "view", "mined", "mined"]
    assert df["positive_reason"].tolist() == [None, "near_duplicate", None, None,
                                              "mutual_neighbour", "mutual_neighbour"]
    conf = df["positive_confidence"].to_numpy()
    assert np.isnan(conf[[0, 2, 3]]).all()
    assert conf[[1, 4, 5]].tolist() == pytest.approx([1.0, 0.75, 0.5])
    assert df["negative_path"].tolist()[1] is None
    assert df["positive_path"].tolist()[4] == "p7.jpg"


def test_ntuple_and_labeled_pair() -> None:
    nt = _with_positives("n-tuple")
    assert nt["anchor_id"].tolist() == [3, 3, 0, 0, 0]
    assert nt["negative_id_1"].tolist() == [6, -1, 4, -1, -1]
    lp = _with_positives("labeled-pair")
    mined = lp[lp["positive_kind"] == "mined"]
    assert mined[["anchor_id", "other_id", "label"]].values.tolist() == [
        [3, 4, 1], [0, 7, 1], [0, 5, 1]]
    # negatives of a labeled-pair table are neither view nor mined positives
    assert lp.loc[lp["label"] == 0, "positive_kind"].isna().all()


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_round_trip_to_train_reader(tmp_path, ext: str) -> None:
    path = tmp_path / f"pairs.{ext}"
    write_table(_with_positives("triplet"), str(path))
    views, mined = split_mined_rows(read_table(str(path)))
    assert views["positive_id"].tolist() == [2, 1, 1]
    sets = positive_sets(mined, 8, np.ones(8, bool))
    assert sets.ids[sets.offsets[0]:sets.offsets[1]].tolist() == [5, 7]
    assert sets.ids[sets.offsets[3]:sets.offsets[4]].tolist() == [4]


def _attracted(fmt: str):  # noqa: ANN202
    # item 0 (anchor row 1) has candidate 7 flagged and attracted; item 3 has none
    mined = MinedPairs(
        anchors=np.array([3, 0]), positives=np.array([2, 1]),
        pos_scores=np.array([0.8, 0.9], np.float32),
        neg_ids=np.array([[6, -1], [4, 5]]),
        neg_scores=np.array([[0.3, np.nan], [0.5, 0.4]], np.float32),
        neg_ranks=np.array([[0, -1], [1, 2]]),
        neg_flags=np.zeros((2, 2), bool), neg_reasons=np.full((2, 2), None, dtype=object),
        fn_rows=np.array([1]), fn_ids=np.array([7]), fn_scores=np.array([0.95], np.float32),
        fn_ranks=np.array([0]), fn_reasons=np.array(["near_duplicate"], dtype=object))
    table = build_pair_table(mined, fmt, "sid", PATHS, flag_columns=True)
    return add_mined_positives(
        table, fmt, np.array([3, 0]), rows=np.array([0]), ids=np.array([4]),
        scores=np.array([0.7], np.float32), confidence=np.array([1.0], np.float32),
        reasons=np.array(["near_duplicate"], dtype=object), store_id="sid", paths=PATHS)


def test_attracted_rows_are_not_view_positives() -> None:
    # triplet: the attracted candidate is the row's negative (false_negative true) and
    # its positive the anchor's view positive, so the row's positive_kind is view
    tr = _attracted("triplet")
    row = tr[tr["negative_id"] == 7]
    assert row[["anchor_id", "positive_id"]].values.tolist() == [[0, 1]]
    assert row["false_negative"].tolist() == [True]
    assert row["positive_kind"].tolist() == ["view"]
    # labeled-pair: the attracted candidate is the row's other, which is no view positive
    # (nor a mined one): positive_kind null, as on the negative rows; false_negative marks it
    lp = _attracted("labeled-pair")
    assert lp[["anchor_id", "other_id", "label"]].values.tolist() == [
        [3, 2, 1], [3, 6, 0], [3, 4, 1], [0, 1, 1], [0, 4, 0], [0, 5, 0], [0, 7, 1]]
    assert lp["positive_kind"].tolist() == ["view", None, "mined", "view", None, None, None]
    assert lp["false_negative"].tolist() == [False, False, False, False, False, False, True]
    views, mined = split_mined_rows(lp)
    assert views["other_id"].tolist() == [2, 6, 1, 4, 5, 7]
    assert mined["other_id"].tolist() == [4]
