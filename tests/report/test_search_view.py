"""report of a pairkit search table: queries with their neighbours, thumbnails from the
store the table names (store_id), labels that differ from an item query's marked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.report.search_view import build_search_section
from tests.conftest import make_images
from tests.report.test_cli_report import page_data
from tests.report.test_views import ref_table

runner = CliRunner()


def test_section_by_hand() -> None:
    t = pd.DataFrame({
        "store_id": "s", "query": ["id:0", "id:0", "a.jpg", "a.jpg", "a.jpg"],
        "query_kind": ["item", "item", "image", "image", "image"],
        "rank": [1, 0, 0, 1, 2], "id": [2, 1, 0, 3, 1],
        "score": [0.5, 0.9, 1.0, 0.25, 0.2], "path": ["p2", "p1", "p0", "p3", "p1"]})
    ref, seen = ref_table()
    labels = np.array(["x", "x", "y", "x"], dtype=object)
    sec = build_search_section("hits", t, sample=0, labels=labels, ref=ref)
    assert [q["q"] for q in sec["queries"]] == ["id:0", "a.jpg"]  # table order
    assert sec["queries"][0]["hits"] == [[1, 0, 0.9, True], [2, 1, 0.5, False]]  # by rank
    assert sec["queries"][1]["hits"] == [[0, 0, 1.0, None], [3, 1, 0.25, None],
                                         [1, 2, 0.2, None]]
    s = sec["summary"]
    assert s["queries"] == 2 and s["rows"] == 5 and s["kinds"] == {"item": 1, "image": 1}
    assert s["score"]["median"] == 0.5 and seen == {2: "p2", 1: "p1", 0: "p0", 3: "p3"}
    one = build_search_section("hits", t, sample=1, labels=None, ref=ref)
    assert [q["q"] for q in one["queries"]] == ["id:0"] and one["summary"]["queries_shown"] == 1


def test_a_neighbour_without_a_label_is_not_of_another_label() -> None:
    """Found by a bug hunt (2026-12-07): a neighbour with no label was compared as a label
    (None != "x") and marked "other label" on the page; its label is unknown (None), as a
    query item's missing label makes every mark unknown."""
    t = pd.DataFrame({
        "store_id": "s", "query": ["id:0"] * 3 + ["id:2"], "query_kind": "item",
        "rank": [0, 1, 2, 0], "id": [1, 2, 3, 0], "score": [0.9, 0.8, 0.7, 0.6],
        "path": ["p1", "p2", "p3", "p0"]})
    ref, _ = ref_table()
    labels = np.array(["x", "x", None, "y"], dtype=object)
    sec = build_search_section("hits", t, sample=0, labels=labels, ref=ref)
    assert [h[3] for h in sec["queries"][0]["hits"]] == [True, None, False]
    assert [h[3] for h in sec["queries"][1]["hits"]] == [None]  # the query has no label


def test_a_repeated_query_is_two_queries() -> None:
    """Found by a bug hunt (2026-12-06): ``search store 5 5`` writes the query twice; the
    view grouped rows by the query's text, so it showed one query with every hit twice
    (ranks 0, 0, 1, 1) and counted 1 of 1 queries. A rank seen again starts another."""
    t = pd.DataFrame({
        "store_id": "s", "query": ["id:5"] * 4, "query_kind": ["item"] * 4,
        "rank": [0, 1, 0, 1], "id": [13, 27, 13, 27], "score": [0.9, 0.8, 0.9, 0.8],
        "path": ["a", "b", "a", "b"]})
    ref, _ = ref_table()
    sec = build_search_section("hits", t, sample=0, labels=None, ref=ref)
    assert [q["q"] for q in sec["queries"]] == ["id:5", "id:5"]
    assert [[h[:2] for h in q["hits"]] for q in sec["queries"]] == [[[13, 0], [27, 1]]] * 2
    assert sec["summary"]["queries"] == 2 and sec["summary"]["kinds"] == {"item": 2}


def test_report_of_a_search_table(tmp_path: Path) -> None:
    make_images(tmp_path / "images", n_per_class=3, classes=2)
    r = runner.invoke(app, ["embed", str(tmp_path / "images"), "-o", str(tmp_path / "store"),
                            "--model", "fake", "--labels", "folder", "-q"])
    assert r.exit_code == 0, r.output
    st = Store.open(tmp_path / "store")
    hits = tmp_path / "hits.parquet"
    r = runner.invoke(app, ["search", str(st.root), "0", "4", "-k", "3", "-o", str(hits)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["report", str(hits), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert f"{hits}: 2 of 2 queries, 6 neighbours" in r.output
    data, _ = page_data(tmp_path / "rep" / "index.html")
    (sec,) = data["sections"]
    assert sec["kind"] == "search" and Path(sec["store"]) == st.root.resolve()
    table = pd.read_parquet(hits)
    items = data["items"]
    for q in sec["queries"]:
        want = table[table["query"] == q["q"]].sort_values("rank")
        assert [items[h[0]]["id"] for h in q["hits"]] == want["id"].tolist()
        own = st.items["label"][int(q["q"][3:])]
        assert [h[3] for h in q["hits"]] == (want["label"] == own).tolist()
    assert all(it["thumb"] and (tmp_path / "rep" / it["thumb"]).is_file() for it in items)


def test_items_inside_tar_shards_and_dataset_files_get_thumbnails(tmp_path: Path) -> None:
    import tarfile

    datasets = __import__("pytest").importorskip("datasets")
    make_images(tmp_path / "img", n_per_class=2, classes=2)
    files = sorted(p for p in (tmp_path / "img").rglob("*") if p.is_file())
    with tarfile.open(tmp_path / "00000.tar", "w") as tf:
        for n, p in enumerate(files):
            tf.add(p, arcname=f"k{n}{p.suffix}")
    ds = datasets.Dataset.from_dict({"image": [{"bytes": p.read_bytes(), "path": None}
                                               for p in files]},
                                    features=datasets.Features({"image": datasets.Image()}))
    ds.save_to_disk(str(tmp_path / "ds"))
    for src in (tmp_path / "00000.tar", tmp_path / "ds"):
        store = tmp_path / f"store-{src.name}"
        r = runner.invoke(app, ["embed", str(src), "-o", str(store), "--model", "fake", "-q"])
        assert r.exit_code == 0, r.output
        hits = tmp_path / f"hits-{src.name}.csv"
        assert runner.invoke(app, ["search", str(store), "0", "-k", "3", "--include-same-source",
                                   "-o", str(hits)]).exit_code == 0
        out = tmp_path / f"rep-{src.name}"
        r = runner.invoke(app, ["report", str(hits), "--store", str(store), "-o", str(out)])
        assert r.exit_code == 0, r.output
        data, _ = page_data(out / "index.html")
        assert len(data["items"]) == 3
        for it in data["items"]:
            assert it["why"] is None and (out / it["thumb"]).is_file(), it
    # a container path that climbs out of the image root is refused, never read
    from pairkit.report.thumbs import resolve_under

    real, why = resolve_under((tmp_path / "ds").resolve(), "../00000.tar/k0.jpg")
    assert real is None and "outside the image root" in why


def test_padding_rows_and_an_unknown_query_id() -> None:
    """A padding row (id -1, score -inf: fewer neighbours than asked) is no hit; it must
    not show the store's last item. An item query past the labels has no label to
    compare (None), not an IndexError."""
    t = pd.DataFrame({
        "store_id": "s", "query": ["id:1", "id:1", "id:9", "id:9"],
        "query_kind": ["item"] * 4, "rank": [0, 1, 0, 1], "id": [2, -1, 3, -1],
        "score": [0.5, -np.inf, 0.25, -np.inf], "path": ["p2", None, "p3", None]})
    ref, seen = ref_table()
    labels = np.array(["x", "x", "y", "x"], dtype=object)
    sec = build_search_section("hits", t, sample=0, labels=labels, ref=ref)
    assert [q["hits"] for q in sec["queries"]] == [[[2, 0, 0.5, False]], [[3, 0, 0.25, None]]]
    assert seen == {2: "p2", 3: "p3"}


def test_an_id_that_is_no_whole_number_is_refused_without_a_store_too(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-07): with no store beside it, a search table's id 7.5
    was shown as item 7 and an id ``abc`` dropped its row without a word (pair tables and
    dedup groups refuse both, with a store or without). An empty cell stays a padding row."""
    t = pd.DataFrame({
        "store_id": "s", "query": ["id:0"] * 3, "query_kind": ["item"] * 3,
        "rank": [0, 1, 2], "id": ["6", "", "1"], "score": [0.5, 0.4, 0.3],
        "path": ["a.png", None, "c.png"]})
    (tmp_path / "t").mkdir()
    t.to_csv(tmp_path / "t" / "ok.csv", index=False)
    r = runner.invoke(app, ["report", str(tmp_path / "t" / "ok.csv"), "-o", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    data, _ = page_data(tmp_path / "r" / "index.html")
    assert [h[1] for h in data["sections"][0]["queries"][0]["hits"]] == [0, 2]
    for bad in ("7.5", "abc"):
        t.loc[1, "id"] = bad
        t.to_csv(tmp_path / "t" / "bad.csv", index=False)
        r = runner.invoke(app, ["report", str(tmp_path / "t" / "bad.csv"), "-o",
                                str(tmp_path / "r2")])
        assert r.exit_code == 1, r.output
        assert "column id must hold integer ids, got " in r.output, r.output
        assert f"{bad}" in r.output and "(row 1)" in r.output
        assert not (tmp_path / "r2").exists()


def test_an_empty_query_cell_and_an_id_of_other_digits_are_no_internal_error(
        tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-07): a search table whose query cell is empty (a CSV
    of ``search --text ""``: pandas reads the empty text back as missing) or whose item
    query is ``id:²`` (``str.isdigit`` holds, ``int`` refuses) stopped the report with an
    internal error (AttributeError on a float, ValueError) when the store's labels were
    known. The empty query is the empty text; ``id:²`` names no item: no label compared."""
    t = pd.DataFrame({
        "store_id": "s", "query": ["", "", "id:\u00b2", "id:1"],
        "query_kind": ["text", "text", "item", "item"],
        "rank": [0, 1, 0, 0], "id": [2, 1, 0, 3], "score": [0.5, 0.4, 0.3, 0.2],
        "path": ["p2", "p1", "p0", "p3"]})
    t.to_csv(tmp_path / "hits.csv", index=False)
    from pairkit.core.tables import read_table

    table = read_table(tmp_path / "hits.csv")
    assert table["query"].isna().iloc[0]  # as the report reads it
    ref, _ = ref_table()
    labels = np.array(["x", "x", "y", "x"], dtype=object)
    sec = build_search_section("hits", table, sample=0, labels=labels, ref=ref)
    assert [q["q"] for q in sec["queries"]] == ["", "id:\u00b2", "id:1"]
    assert [q["kind"] for q in sec["queries"]] == ["text", "item", "item"]
    assert sec["queries"][1]["hits"] == [[0, 0, 0.3, None]]
    assert sec["queries"][2]["hits"] == [[3, 0, 0.2, True]]
    assert sec["summary"]["kinds"] == {"text": 1, "item": 2}
