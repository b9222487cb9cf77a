"""Relations: instance / label / pairs:FILE, path resolution and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pairkit.core.relations import (
    build_relation,
    default_relation,
    load_relation,
    normalize_rel_path,
    parse_relation,
)
from pairkit.errors import PairkitError, UsageError


def items_table() -> pd.DataFrame:
    return pd.DataFrame({
        "path": ["a/1.jpg", "a/1.jpg", "a/2.jpg", "b/3.jpg", "b/4.jpg", "c/5.jpg"],
        "source": ["a/1.jpg", "a/1.jpg", "a/2.jpg", "b/3.jpg", "b/4.jpg", "c/5.jpg"],
        "view": [0, 1, 0, 0, 0, 0],
        "label": pd.array(["a", "a", "a", "b", "b", None], dtype="string"),
    })


def test_instance_relation() -> None:
    rel = build_relation("instance", items_table())
    assert rel.anchors().tolist() == [0, 1]
    off, ids = rel.positive_sets(rel.anchors())
    assert off.tolist() == [0, 1, 2] and ids.tolist() == [1, 0]
    got = rel.is_positive(np.array([0, 2]), np.array([[0, 1, 2, -1], [0, 1, 2, 3]]))
    assert got.tolist() == [[False, True, False, False], [False, False, False, False]]


def test_label_relation_and_sampled_positive_sets() -> None:
    rel = build_relation("label", items_table())
    assert rel.anchors().tolist() == [0, 1, 2, 3, 4]  # item 5 has no label
    off, ids = rel.positive_sets(rel.anchors())
    sets = [ids[off[i]:off[i + 1]].tolist() for i in range(5)]
    assert sets == [[1, 2], [0, 2], [0, 1], [4], [3]]
    off, ids = rel.positive_sets(rel.anchors(), seed=1, max_positives=1)
    sets = [ids[off[i]:off[i + 1]].tolist() for i in range(5)]
    assert [len(s) for s in sets] == [1] * 5 and sets[0][0] in (1, 2) and sets[3] == [4]
    got = rel.is_positive(np.array([5, 3]), np.array([[5, 0], [4, 5]]))
    assert got.tolist() == [[False, False], [True, False]]


def test_default_relation() -> None:
    t = items_table()
    assert default_relation(t) == "instance"
    single = t.drop_duplicates("source")
    assert default_relation(single) == "label"
    bare = single.assign(label=pd.array([None] * len(single), dtype="string"))
    with pytest.raises(PairkitError, match="pass --relation pairs:FILE"):
        default_relation(bare)


def test_parse_relation() -> None:
    assert parse_relation("pairs:x.csv") == ("pairs", "x.csv")
    for bad in ("pairs:", "source", ""):
        with pytest.raises(UsageError, match="--relation must be"):
            parse_relation(bad)


def test_pairs_relation_resolves_paths(tmp_path: Path) -> None:
    f = tmp_path / "pairs.csv"
    pd.DataFrame({"anchor": ["a/2.jpg", "./b/3.jpg", "nope.jpg", "a/1.jpg"],
                  "positive": ["b/4.jpg", "b//4.jpg", "c/5.jpg", "c/5.jpg"]}).to_csv(f,
                                                                                   index=False)
    rel = load_relation(f"pairs:{f}", items_table())
    assert rel.rows_total == 4 and rel.rows_unknown == 1
    assert rel.unknown_examples == ("nope.jpg",)
    # a/1.jpg has two views: both are anchors of c/5.jpg
    assert rel.anchors().tolist() == [0, 1, 2, 3]
    off, ids = rel.positive_sets(rel.anchors())
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(4)] == [[5], [5], [4], [4]]
    # symmetric for exclusion: 4 -> 2 counts as a positive pair too
    assert rel.is_positive(np.array([4]), np.array([[2, 3, 0]])).tolist() == [[True, True,
                                                                                False]]


def test_pairs_relation_errors(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    pd.DataFrame({"anchor": ["x.jpg"], "positive": ["y.jpg"]}).to_json(f, orient="records",
                                                                       lines=True)
    with pytest.raises(PairkitError, match="none of its 1 rows match store paths"):
        load_relation(f"pairs:{f}", items_table())
    g = tmp_path / "q.csv"
    pd.DataFrame({"anchor": ["../a/1.jpg"], "positive": ["a/2.jpg"]}).to_csv(g, index=False)
    with pytest.raises(PairkitError, match="escapes the image root"):
        load_relation(f"pairs:{g}", items_table())
    h = tmp_path / "r.csv"
    pd.DataFrame({"a": ["a/1.jpg"], "b": ["a/2.jpg"]}).to_csv(h, index=False)
    with pytest.raises(PairkitError, match="needs columns anchor,positive"):
        load_relation(f"pairs:{h}", items_table())
    with pytest.raises(PairkitError, match="not found"):
        load_relation(f"pairs:{tmp_path / 'none.csv'}", items_table())
    # found by a bug hunt (hunt-s 4): a folder was "pairs file DIR not found"; a folder
    # given as a table is a parquet dataset (docs/formats.md), as train --pairs reads it
    parts = tmp_path / "parts"
    parts.mkdir()
    with pytest.raises(PairkitError, match=f"table folder {parts} holds no .parquet files"):
        load_relation(f"pairs:{parts}", items_table())
    pd.DataFrame({"anchor": ["a/1.jpg"], "positive": ["a/2.jpg"]}).to_parquet(
        parts / "part-00000.parquet")
    assert load_relation(f"pairs:{parts}", items_table()) is not None


def test_normalize_rel_path() -> None:
    assert normalize_rel_path("a/./b/../c.jpg") == "a/c.jpg"
    for bad in ("../x", "a/../../x", "/etc/passwd", "C:\\\\x.jpg", ".."):
        with pytest.raises(PairkitError):
            normalize_rel_path(bad)


def plain_group_positive_sets(group: np.ndarray, anchors: np.ndarray, seed: int,
                              max_positives: int) -> tuple[np.ndarray, np.ndarray]:
    """The positive sets of a group relation, one anchor at a time (its group's members
    in id order but itself; a big group: the seeded sample, in the same draw order)."""
    order = np.argsort(group, kind="stable")
    rng = np.random.default_rng(seed)
    sets, big = [], []
    for a in anchors:
        members = order[group[order] == group[a]]
        members = members[members != a]
        if len(members) > max_positives:
            big.append(len(sets))
        sets.append(members)
    for i in big:
        sets[i] = np.sort(rng.choice(sets[i], size=max_positives, replace=False))
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])]).astype(np.int64)
    return offsets, (np.concatenate(sets) if sets else np.zeros(0)).astype(np.int64)


@pytest.mark.parametrize("case", range(8))
def test_group_positive_sets_are_the_plain_ones(case: int) -> None:
    from pairkit.core.relations import Relation

    rng = np.random.default_rng(case)
    n = [40, 300, 1000, 2, 500, 60, 200, 1][case]
    if case == 4:  # two views per source, every source: the instance relation of a store
        group = np.arange(n) // 2
    else:
        group = rng.integers(-1 if case % 2 else 0, max(1, n // [3, 5, 50, 1][case % 4]), n)
    rel = Relation("label", n, "test", group=group)
    for anchors in (rel.anchors(), rng.permutation(rel.anchors())):
        for max_positives in (64, 3, 1):
            got = rel.positive_sets(anchors, seed=case, max_positives=max_positives)
            want = plain_group_positive_sets(group, anchors, case, max_positives)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("names", [("anchor", "positive"), ("anchor_path", "positive_path")])
def test_pairs_file_paths_are_text_as_written(tmp_path: Path, names) -> None:
    items = pd.DataFrame({"path": ["001", "1", "007", "7"], "source": ["001", "1", "007", "7"],
                          "view": [0, 0, 0, 0], "label": ["a", "a", "b", "b"]})
    f = tmp_path / "pairs.csv"
    f.write_text(f"{names[0]},{names[1]}\n001,007\n")
    rel = load_relation(f"pairs:{f}", items)
    assert rel.anchors().tolist() == [0]  # '001' and '007', not the items '1' and '7'
    off, ids = rel.positive_sets(rel.anchors())
    assert ids.tolist() == [2]


def test_a_pairs_row_of_one_item_is_no_pair(tmp_path: Path) -> None:
    """Mutation audit 4a (RL5): a row naming one path twice pairs that path's views with
    each other, never an item with itself (a triplet whose anchor is its positive)."""
    f = tmp_path / "same.csv"
    pd.DataFrame({"anchor": ["a/2.jpg"], "positive": ["a/2.jpg"]}).to_csv(f, index=False)
    with pytest.raises(PairkitError, match="give a pair of two different store items"):
        load_relation(f"pairs:{f}", items_table())
    pd.DataFrame({"anchor": ["a/1.jpg", "a/2.jpg"],
                  "positive": ["a/1.jpg", "a/2.jpg"]}).to_csv(f, index=False)
    rel = load_relation(f"pairs:{f}", items_table())  # a/1.jpg: views 0 and 1
    assert rel.anchors().tolist() == [0, 1]
    off, ids = rel.positive_sets(rel.anchors())
    assert off.tolist() == [0, 1, 2] and ids.tolist() == [1, 0]
    assert rel.pair_keys.tolist() == [1, 6]  # 0 * 6 + 1 and 1 * 6 + 0


def test_unknown_examples_name_the_path_not_found(tmp_path: Path) -> None:
    """Mutation audit 4a (RL9): the example of an unknown row is its path that is not in
    the store, the positive's when the anchor is found."""
    f = tmp_path / "p.csv"
    pd.DataFrame({"anchor": ["a/2.jpg", "gone.jpg"],
                  "positive": ["lost.jpg", "b/4.jpg"]}).to_csv(f, index=False)
    with pytest.raises(PairkitError, match=r"\(e\.g\. 'lost\.jpg', 'gone\.jpg'\)"):
        load_relation(f"pairs:{f}", items_table())
