"""Pair tables and relations -> training examples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.errors import PairkitError
from pairkit.eval.split import split_by_source
from pairkit.train.data import (
    pairs_from_table,
    relation_groups,
    restrict,
    sample_relation_pairs,
)
from tests.conftest import random_store
from tests.train.helpers import instance_triplets, to_ntuple


def triplets(rows, store_id="abc"):
    df = pd.DataFrame(rows, columns=["anchor_id", "positive_id", "negative_id"])
    df.insert(0, "store_id", store_id)
    return df


def test_triplet_rows_grouped_by_anchor_and_positive():
    df = triplets([(0, 1, 5), (2, 3, 6), (0, 1, 7), (0, 1, 8)])
    pairs, info = pairs_from_table(df, 10, "abc")
    assert info.kind == "triplet" and info.rows == 4 and info.notes == ()
    assert pairs.anchor.tolist() == [0, 2] and pairs.positive.tolist() == [1, 3]
    assert pairs.negatives.tolist() == [[5, 7, 8], [6, -1, -1]]
    assert not pairs.neg_attract.any()


def test_fn_mode_without_flags_is_said():
    """Found by a bug hunt (2026-12-06): --fn-mode attract on a table without flags did
    nothing, silently."""
    df = triplets([(0, 1, 5), (2, 3, 6)])
    _, info = pairs_from_table(df, 10, "abc", "attract")
    assert any("no false_negative column" in n and "nothing to attract" in n
               for n in info.notes)
    assert pairs_from_table(df, 10, "abc")[1].notes == ()


def test_a_repeated_row_counts_once():
    """Found by a bug hunt (2026-12-06): a table concatenated with itself put each
    negative twice in its anchor's denominator (repeated mined positives counted once)."""
    df = triplets([(0, 1, 5), (2, 3, 6), (0, 1, 7)])
    once, _ = pairs_from_table(df, 10, "abc")
    twice, _ = pairs_from_table(pd.concat([df, df], ignore_index=True), 10, "abc")
    assert twice.negatives.tolist() == once.negatives.tolist() == [[5, 7], [6, -1]]
    assert twice.anchor.tolist() == [0, 2]


@pytest.mark.parametrize("mode, negs, attract", [
    ("eliminate", [[7]], [[False]]),
    ("attract", [[5, 7]], [[True, False]]),
    ("keep", [[5, 7]], [[False, False]]),
])
def test_false_negative_modes(mode, negs, attract):
    df = triplets([(0, 1, 5), (0, 1, 7)])
    df["false_negative"] = [True, False]
    df["fn_reason"] = ["label", None]
    pairs, info = pairs_from_table(df, 10, "abc", fn_mode=mode)
    assert info.flagged == 1
    assert pairs.negatives.tolist() == negs
    assert pairs.neg_attract.tolist() == attract


def test_ntuple_rows_grouped_with_attracted_rows_as_mine_writes_them():
    # mine --fn-mode attract, n-tuple: the anchor's row, then one extra row per attracted
    # candidate (false_negative=True, the candidate in negative_id_1, other slots -1)
    df = pd.DataFrame({"store_id": ["abc"] * 3, "anchor_id": [0, 0, 2],
                       "positive_id": [1, 1, 3], "negative_id_1": [4, 9, 5],
                       "negative_id_2": [6.0, None, None],
                       "false_negative": [False, True, False]})
    pairs, info = pairs_from_table(df, 10, "abc", fn_mode="attract")
    assert info.kind == "n-tuple" and info.flagged == 1
    assert pairs.anchor.tolist() == [0, 2]
    assert pairs.negatives.tolist() == [[4, 6, 9], [5, -1, -1]]
    assert pairs.neg_attract.tolist() == [[False, False, True], [False, False, False]]
    pairs, _ = pairs_from_table(df, 10, "abc", fn_mode="eliminate")
    assert pairs.negatives.tolist() == [[4, 6], [5, -1]]


def test_ntuple_row_flag_with_several_negatives_drops_them():
    # mine --fn-mode keep, n-tuple: one flag per row; which negative is unknown
    df = pd.DataFrame({"store_id": ["abc"] * 2, "anchor_id": [0, 2], "positive_id": [1, 3],
                       "negative_id_1": [4, 5], "negative_id_2": [6, 7],
                       "false_negative": [True, False], "fn_reason": ["label", None]})
    pairs, info = pairs_from_table(df, 10, "abc")
    assert pairs.negatives.tolist() == [[-1, -1], [5, 7]]
    assert "1 n-tuple rows are flagged" in info.notes[0]
    pairs, info = pairs_from_table(df, 10, "abc", fn_mode="keep")
    assert pairs.negatives.tolist() == [[4, 6], [5, 7]] and info.notes == ()


def test_table_from_another_store_is_refused():
    with pytest.raises(PairkitError, match="came from another store .*store_id zzz"):
        pairs_from_table(triplets([(0, 1, 2)], store_id="zzz"), 10, "abc")


def test_table_without_store_id_is_accepted_with_a_note():
    df = triplets([(0, 1, 2)]).drop(columns="store_id")
    _, info = pairs_from_table(df, 10, "abc")
    assert "no store_id" in info.notes[0]


def test_table_with_an_empty_store_id_column_is_accepted_with_a_note():
    """Found by a bug hunt (2026-12-07): a store_id column of empty cells (a CSV whose
    store_id was blanked) skipped the check without the note a table without the column
    gets."""
    df = triplets([(0, 1, 2), (3, 4, 5)], store_id=None)
    _, info = pairs_from_table(df, 10, "abc")
    assert any("no store_id" in note for note in info.notes), info.notes


@pytest.mark.parametrize("row, message", [
    ((0, 12, 2), "positive_id 12 is out of range for a store of 10 items"),
    ((-1, 1, 2), "anchor_id -1 is out of range"),
    ((0, 1, 10), "negative_id 10 is out of range"),
])
def test_ids_out_of_range(row, message):
    with pytest.raises(PairkitError, match=message):
        pairs_from_table(triplets([(0, 1, 2), row]), 10, "abc")


def test_bad_tables():
    with pytest.raises(PairkitError, match="pair table is empty"):
        pairs_from_table(triplets([]), 10, "abc")
    with pytest.raises(PairkitError, match="labeled-pair table"):
        pairs_from_table(pd.DataFrame({"anchor_id": [0], "other_id": [1], "label": [1]}), 10, "x")
    with pytest.raises(PairkitError, match="neither negative_id"):
        pairs_from_table(pd.DataFrame({"anchor_id": [0], "positive_id": [1]}), 10, "x")
    df = triplets([(0, 1, 2)])
    df["anchor_id"] = ["a"]
    with pytest.raises(PairkitError, match="anchor_id must hold integer ids"):
        pairs_from_table(df, 10, "abc")
    with pytest.raises(PairkitError, match="--fn-mode must be one of"):
        pairs_from_table(triplets([(0, 1, 2)]), 10, "abc", fn_mode="drop")


@pytest.mark.parametrize("column, values, message", [
    ("negative_id", ["oops", "oops"], "negative_id must hold integer ids, got 'oops' .row 0"),
    ("negative_id", ["5", "1.5"], "negative_id must hold integer ids, got '1.5' .row 1"),
    ("false_negative", ["False", "maybe"], "false_negative must hold true/false, got 'maybe'"),
])
def test_bogus_values_are_refused_not_dropped(column, values, message):
    """Issue 20.3: negative ids that are not numbers were read as "no negative", so train
    ran on in-batch negatives only without a word."""
    df = triplets([(0, 1, 5), (2, 3, 6)])
    df[column] = values
    with pytest.raises(PairkitError, match=message):
        pairs_from_table(df, 10, "abc")


@pytest.mark.parametrize("values, shown", [
    (["5", "99999999999999999999999"], "'99999999999999999999999'"),
    ([5.0, 1e30], "1e\\+30"),
    ([5.0, float("inf")], "inf"),
    (["5", "-inf"], "'-inf'"),
])
def test_ids_beyond_int64_are_refused_as_written(values, shown, recwarn):
    """Found by a bug hunt (2026-12-07): an id past int64 (or infinite) was cast as it came,
    numpy's 'invalid value encountered in cast' warning printed, and the refusal named
    -9223372036854775808, a value the table does not hold."""
    df = triplets([(0, 1, 5), (2, 3, 6)]).astype({"negative_id": object})
    df["negative_id"] = values
    with pytest.raises(PairkitError, match=f"column negative_id holds {shown} .row 1., "
                                           "not a store row"):
        pairs_from_table(df, 10, "abc")
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_empty_negative_cells_still_mean_none_and_self_pairs_are_refused():
    df = triplets([(0, 1, 5), (2, 3, 6)]).astype({"negative_id": object})
    df.loc[1, "negative_id"] = ""
    df["false_negative"] = ["false", None]
    pairs, _ = pairs_from_table(df, 10, "abc")
    assert pairs.negatives.tolist() == [[5], [-1]]
    with pytest.raises(PairkitError, match="row 1 has anchor_id == positive_id .2."):
        pairs_from_table(triplets([(0, 1, 5), (2, 2, 6)]), 10, "abc")


def test_helper_tables_read_back(tmp_path):
    store = random_store(tmp_path / "s", n_sources=12, views=2, dim=8, classes=3)
    trip = instance_triplets(store, k=3, keep_flagged=True)
    a, _ = pairs_from_table(trip, store.count, store.content_id, fn_mode="keep")
    b, _ = pairs_from_table(to_ntuple(trip), store.count, store.content_id)
    assert np.array_equal(a.anchor, b.anchor) and np.array_equal(a.negatives, b.negatives)
    assert len(a) == store.count


def test_relation_pairs_sample_other_members_of_the_group():
    groups = np.array([0, 0, 1, 2, 2, 2, 3])
    eligible = np.ones(7, dtype=bool)
    pairs = sample_relation_pairs(groups, eligible, np.random.default_rng(0))
    assert sorted(pairs.anchor.tolist()) == [0, 1, 3, 4, 5]   # 2 and 6 are alone
    assert (groups[pairs.anchor] == groups[pairs.positive]).all()
    assert (pairs.anchor != pairs.positive).all()
    eligible[4] = False
    pairs = sample_relation_pairs(groups, eligible, np.random.default_rng(1))
    assert 4 not in pairs.anchor and 4 not in pairs.positive
    # every other member is drawn sometimes
    seen = {int(sample_relation_pairs(groups, np.ones(7, bool), np.random.default_rng(s))
                .positive[2]) for s in range(40)}
    assert seen == {4, 5}


def test_relation_groups():
    sources = np.array([0, 0, 1, 1])
    assert relation_groups(sources, None, "instance").tolist() == [0, 0, 1, 1]
    labels = np.array(["a", None, "b", "a"], dtype=object)
    g = relation_groups(sources, labels, "label")
    assert g[0] == g[3] and len({g[0], g[1], g[2]}) == 3
    # every unlabelled item is a group of its own: two of them are no positives of each
    # other (hunt 3b: all unlabelled items in one group survived)
    g = relation_groups(np.arange(5), np.array(["a", None, "b", None, None], dtype=object),
                        "label")
    assert len(set(g.tolist())) == 5
    with pytest.raises(PairkitError, match="needs a store with labels"):
        relation_groups(sources, None, "label")
    with pytest.raises(PairkitError, match="--relation must be one of"):
        relation_groups(sources, None, "pairs")


def test_split_by_source_keeps_views_together_and_restrict():
    sources = np.repeat(np.arange(20), 3)
    val = split_by_source(sources, 0.25, seed=0, option="--val-fraction", allow_zero=True)
    assert len(np.unique(sources[val])) == 5
    for s in range(20):
        assert len(set(val[sources == s])) == 1
    assert not split_by_source(sources, 0.0, 0, option="--val-fraction", allow_zero=True).any()
    with pytest.raises(PairkitError, match="--val-fraction must be in"):
        split_by_source(sources, 1.0, 0, option="--val-fraction", allow_zero=True)
    df = triplets([(0, 1, 3), (3, 4, 0)])
    pairs, _ = pairs_from_table(df, 60, "abc")
    allowed = np.ones(60, dtype=bool)
    allowed[3:6] = False
    kept = restrict(pairs, allowed)
    assert kept.anchor.tolist() == [0] and kept.negatives.tolist() == [[-1]]


def test_restrict_drops_an_example_whose_positive_is_held_out():
    """An allowed anchor whose positive is held out (a validation item) is no training
    example: its positive would leak into training (hunt 3b: only the anchor checked
    survived)."""
    pairs, _ = pairs_from_table(triplets([(0, 4, 1), (2, 1, 0)]), 10, "abc")
    allowed = np.ones(10, dtype=bool)
    allowed[4] = False
    kept = restrict(pairs, allowed)
    assert kept.anchor.tolist() == [2] and kept.positive.tolist() == [1]
    assert kept.negatives.tolist() == [[0]]


@pytest.mark.parametrize("mode, flagged", [
    ("eliminate", [[0, 5]]), ("attract", [[0, 5]]), ("keep", [])])
def test_flagged_pairs_are_kept_for_the_in_batch_exclusions(mode, flagged):
    """The (anchor, negative) pairs flagged false_negative are known same-thing pairs
    under eliminate and attract (no in-batch negative of that anchor either), none under
    keep (hunt 3b: attract returning none survived)."""
    df = triplets([(0, 1, 5), (0, 1, 7), (2, 3, 6)])
    df["false_negative"] = [True, False, False]
    _, info = pairs_from_table(df, 10, "abc", fn_mode=mode)
    assert info.flagged_pairs.tolist() == flagged


def test_unknown_table_names_at_most_twelve_columns():
    """Found by a bug hunt (hunt-l 9): a table of 20,000 columns gave a 129 KB error
    listing every one; the list is cut after 12 columns, as report's is."""
    wide = pd.DataFrame([list(range(20))], columns=[f"c{i}" for i in range(20)])
    with pytest.raises(PairkitError, match="neither negative_id") as exc:
        pairs_from_table(wide, 10, "x")
    message = str(exc.value)
    assert "c11, ... (20 columns)" in message and "c12" not in message
