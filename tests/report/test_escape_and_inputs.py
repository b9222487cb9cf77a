"""Escaping of data for the page, and what kind of input a file is."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pairkit.core.table_items import item_columns
from pairkit.errors import PairkitError
from pairkit.report.escape import html_text, json_for_script
from pairkit.report.inputs import eval_results, pair_format, read_input
from tests.report.kit import HOSTILE_LABELS, HOSTILE_NAMES, HOSTILE_REASON, bomb_png, image

HOSTILE = [*HOSTILE_NAMES, *HOSTILE_LABELS, HOSTILE_REASON, "</SCRIPT >", "<!--", "]]>",
           "\u2028\u2029", "a\0b"]


def test_json_for_script_cannot_close_the_block_and_round_trips():
    data = {"strings": HOSTILE, "nested": {"<k>": ["&", np.float32(0.5), np.int64(3)]},
            "nan": float("nan"), "inf": np.float64("inf"), "flag": np.bool_(True)}
    text = json_for_script(data)
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in text
    back = json.loads(text)
    assert back["strings"] == HOSTILE
    assert back["nested"] == {"<k>": ["&", 0.5, 3]}
    assert back["nan"] is None and back["inf"] is None and back["flag"] is True


def test_json_for_script_numpy_nan_and_arrays():
    """A numpy float32 NaN/inf (no float subclass: json's default hook) becomes null, as a
    Python one does; a numpy array becomes a list, its non-finite values null."""
    text = json_for_script({"a": np.float32("nan"), "b": np.float32("-inf"),
                            "c": np.array([1.5, np.nan, np.inf], dtype=np.float32),
                            "d": np.array([[1, 2], [3, 4]], dtype=np.int64)})
    assert json.loads(text) == {"a": None, "b": None, "c": [1.5, None, None],
                                "d": [[1, 2], [3, 4]]}


def test_html_text_escapes_markup_and_quotes():
    assert html_text("<a href=\"x\">'&'</a>") == (
        "&lt;a href=&quot;x&quot;&gt;&#x27;&amp;&#x27;&lt;/a&gt;")


@pytest.mark.parametrize(("columns", "fmt"), [
    (["anchor_id", "positive_id", "negative_id"], "triplet"),
    (["anchor_id", "positive_id", "negative_id_1", "negative_id_2"], "n-tuple"),
    (["anchor_id", "other_id", "label", "score"], "labeled-pair"),
    (["group", "id", "path", "keep", "similarity", "match"], "dedup"),
    (["path", "label"], None),
])
def test_pair_format_from_columns(columns, fmt):
    assert pair_format(columns) == fmt


def test_item_columns_of_an_n_tuple_table():
    cols = ["anchor_id", "positive_id", "anchor_path", "positive_path", "negative_id_10",
            "negative_id_2", "negative_path_2"]
    assert item_columns("n-tuple", cols) == [
        ("anchor_id", "anchor_path"), ("positive_id", "positive_path"),
        ("negative_id_2", "negative_path_2"), ("negative_id_10", None)]


def test_eval_results_flat_and_compare():
    flat = {"n_queries": 3, "knn_top1": 0.5}
    assert eval_results(flat) == {"result": flat}
    both = {"raw": flat, "head": {"n_queries": 3, "knn_top1": 0.7}}
    assert eval_results(both) == both
    assert eval_results({"anchor_id": 1}) is None
    assert eval_results([1, 2]) is None


def test_read_input_kinds(tmp_path, small_store):
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [1], "negative_id": [2]})
    t.to_csv(tmp_path / "pairs.csv", index=False)
    got = read_input(str(tmp_path / "pairs.csv"))
    assert (got.kind, got.fmt) == ("pairs", "triplet")
    # a one-line JSON Lines table in a .json file is a table, not an eval result
    t.to_json(tmp_path / "one.json", orient="records", lines=True)
    assert read_input(str(tmp_path / "one.json")).kind == "pairs"
    (tmp_path / "eval.json").write_text(json.dumps({"raw": {"n_queries": 2},
                                                    "head": {"n_queries": 2}}))
    got = read_input(str(tmp_path / "eval.json"))
    assert got.kind == "eval" and set(got.results) == {"raw", "head"}
    plots = tmp_path / "plots"
    image(plots / "scores.png", 0)
    (plots / "notes.txt").write_text("x")
    got = read_input(str(plots))
    assert got.kind == "plots" and [p.name for p in got.plots] == ["scores.png"]
    assert read_input(str(plots / "scores.png")).plots == [plots / "scores.png"]


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "missing.csv", "not found"),
    (lambda p: (p / "x.txt").write_text("x") and p / "x.txt", "can't tell what"),
    (lambda p: pd.DataFrame({"path": ["a"]}).to_csv(p / "items.csv") or p / "items.csv",
     "neither a pair table nor dedup groups"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "holds no PNG plots"),
    # found by a bug hunt (2026-12-06): classified by some of their columns, these were an
    # internal error (KeyError) in the views
    (lambda p: (p / "t.csv").write_text("anchor_id,negative_id\n0,1\n") and p / "t.csv",
     "triplet tables need column positive_id"),
    (lambda p: (p / "n.csv").write_text("anchor_id,negative_id_1\n0,1\n") and p / "n.csv",
     "n-tuple tables need column positive_id"),
    (lambda p: (p / "s.csv").write_text("query,query_kind,rank,id\nid:5,item,0,1\n")
     and p / "s.csv", "search tables need column score"),
    # ... and an empty id of dedup groups showed the store's last row as the copy
    (lambda p: (p / "d.csv").write_text("group,id,path,keep\n0,3,a.png,True\n0,,b.png,False\n")
     and p / "d.csv", "^dedup table: column id must hold integer ids, got nan .row 1.$"),
    # found by a bug hunt (2026-12-07): the refusals of dedup and search tables said
    # "pair table: column id ..."; they name the kind of table read
    (lambda p: (p / "s.csv").write_text(
        "query,query_kind,rank,id,score\nid:5,item,0,abc,0.5\n") and p / "s.csv",
     "^search table: column id must hold integer ids, got 'abc' .row 0.$"),
    # found by a bug hunt (2026-12-07): a group that is no whole number was cut (1.5 joined
    # group 1), and 'x', an empty cell or 1e30 (wrapped below 0) dropped its row from the
    # page and the counts, silently
    *[(lambda p, g=g: (p / "g.csv").write_text(
        f"group,id,path,keep\n0,3,a.png,True\n{g},4,b.png,False\n") and p / "g.csv",
       message) for g, message in (
        ("1.5", "dedup table: column group must hold integer ids, got 1.5 .row 1."),
        ("x", "dedup table: column group must hold integer ids, got 'x' .row 1."),
        ("", "dedup table: column group must hold integer ids, got nan .row 1."),
        ("1e30", "dedup table: column group holds 1e.30 .row 1., not"),
        # ... and a negative group dropped its row the same way
        ("-3", "column group holds a negative number, -3 .row 1.: groups are 0, 1, ..."))],
    # found by a bug hunt (2026-12-07): a search table's rank was not checked: 'x', an
    # empty cell or -2 was shown as rank -1 or -2 (and split a query's hits into two
    # searches), 1.5 was cut to rank 1
    *[(lambda p, r=r: (p / "s.csv").write_text(
        f"query,query_kind,rank,id,score\nid:5,item,0,1,0.5\nid:5,item,{r},2,0.4\n")
       and p / "s.csv", message) for r, message in (
        ("1.5", "^search table: column rank must hold integer ids, got 1.5 .row 1.$"),
        ("x", "^search table: column rank must hold integer ids, got 'x' .row 1.$"),
        ("", "^search table: column rank must hold integer ids, got nan .row 1.$"),
        ("-2", "s.csv: column rank holds a negative number, -2 .row 1.: ranks are 0, 1, "
               "... .0 = nearest.$"))],
])
def test_read_input_refuses_what_it_cannot_show(tmp_path, make, message):
    with pytest.raises(PairkitError, match=message):
        read_input(str(make(tmp_path)))


def test_read_input_names_a_store_given_as_input(small_store):
    with pytest.raises(PairkitError, match="is a store.*--store"):
        read_input(str(small_store.root))


def test_bomb_png_is_refused_as_a_plot(tmp_path):
    from pairkit.report.eval_view import check_png

    bomb_png(tmp_path / "bomb.png")
    assert check_png(tmp_path / "bomb.png") == "decompression bomb refused"
    (tmp_path / "fake.png").write_bytes(b"GIF89a")
    assert check_png(tmp_path / "fake.png") == "not a PNG file"
    image(tmp_path / "ok.png", 1)
    assert check_png(tmp_path / "ok.png") is None


def test_a_plot_past_the_pixel_warning_or_the_size_bound_is_refused(tmp_path, monkeypatch):
    """PIL only warns between MAX_IMAGE_PIXELS and twice that; check_png turns the warning
    into a refusal. Files over MAX_PLOT_BYTES are not opened. (Both bounds lowered here.)"""
    from PIL import Image

    import pairkit.report.eval_view as eval_view

    Image.new("RGB", (40, 40)).save(tmp_path / "p.png")  # 1,600 pixels
    assert eval_view.check_png(tmp_path / "p.png") is None
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 1,600 > 1,000, < 2,000: a warning
    assert eval_view.check_png(tmp_path / "p.png") == "decompression bomb refused"
    monkeypatch.undo()
    size = (tmp_path / "p.png").stat().st_size
    monkeypatch.setattr(eval_view, "MAX_PLOT_BYTES", size - 1)
    assert eval_view.check_png(tmp_path / "p.png").startswith("larger than ")
    monkeypatch.setattr(eval_view, "MAX_PLOT_BYTES", size)
    assert eval_view.check_png(tmp_path / "p.png") is None


def test_read_input_takes_a_folder_of_spark_or_pyarrow_parts_for_a_table(tmp_path):
    """Found by a bug hunt (hunt-l 8): only ``part-NNNNN.parquet`` made a folder a table;
    one of pyarrow's ``part-0.parquet`` or Spark's parts was taken for a folder of plots."""
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [1], "negative_id": [2]})
    for name in ("part-0.parquet", "part-00000-1b2c3d4e-5f60-4718-9a0b-c1d2e3f40516-c000"
                 ".snappy.parquet"):
        folder = tmp_path / name.split(".")[0]
        folder.mkdir()
        t.to_parquet(folder / name, index=False)
        (folder / "_SUCCESS").write_bytes(b"")
        got = read_input(str(folder))
        assert (got.kind, got.fmt) == ("pairs", "triplet")
