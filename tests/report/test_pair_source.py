"""A parquet pair table read narrow (ids and scores of every row, the other columns only for
the sampled anchors and the store check) gives the page the whole table gave."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import pairkit.report.build as build_module
import pairkit.report.inputs as inputs_module
import pairkit.report.pair_source as pair_source
from pairkit.cli.main import app
from pairkit.errors import PairkitError
from pairkit.report.pairs_view import (
    MAX_NEGATIVES_SHOWN,
    anchor_blocks,
    sample_anchors,
    summarize,
    to_long,
)
from tests.conftest import random_store
from tests.report.test_cli_report import digest, page_data

runner = CliRunner()


def old_build_pairs_section(name, table, fmt, *, sample, seed, labels, ref, rows=None):  # noqa: ANN001, ANN201, ARG001
    """build_pairs_section as it was before the narrow read: the long form of the whole
    table (every column) for the summary, the sample and the blocks."""
    long = to_long(table, fmt)
    summary = summarize(long, fmt, len(table), labels)
    chosen = sample_anchors(long, sample, seed)
    summary["anchors_shown"] = int(len(chosen))
    summary["sample"] = sample
    summary["seed"] = seed
    return {"kind": "pairs", "name": name, "summary": summary,
            "anchors": anchor_blocks(long, chosen, ref)}


def run(*args: object):  # noqa: ANN201
    return runner.invoke(app, [str(a) for a in args])


def the_old_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read every table whole and build the pairs section as before."""
    monkeypatch.setattr(inputs_module, "_narrow_pairs", lambda spec, path: None)
    monkeypatch.setattr(build_module, "build_pairs_section", old_build_pairs_section)


def page(folder: Path) -> dict:
    data, _ = page_data(folder / "index.html")
    data.pop("created")
    return data


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("narrow")
    random_store(root / "store", n_sources=60)
    flags = ["--relation", "instance", "--filter-false-negatives", "--fn-mode", "keep", "-q"]
    out = {"store": root / "store"}
    for fmt, k in (("triplet", 70), ("n-tuple", 5), ("labeled-pair", 5)):
        out[fmt] = root / f"{fmt}.parquet"
        r = run("mine", root / "store", "--hard", "-k", k, "--format", fmt, *flags,
                "-o", out[fmt])
        assert r.exit_code == 0, r.output
    # the triplet table again as a folder of three parts of several row groups each
    table = pd.read_parquet(out["triplet"])
    (root / "parts").mkdir()
    for j, part in enumerate(np.array_split(np.arange(len(table)), 3)):
        table.iloc[part].to_parquet(root / "parts" / f"part-{j}.parquet", index=False,
                                    row_group_size=700)
    out["parts"] = root / "parts"
    return out


@pytest.mark.parametrize("which", ["triplet", "n-tuple", "labeled-pair", "parts"])
def test_the_narrow_read_gives_the_page_of_the_whole_table(mined, tmp_path, monkeypatch,
                                                          which):
    monkeypatch.setattr(pair_source, "BATCH_ROWS", 333)  # batches across row groups
    narrow_reads = []
    real = pair_source.read_narrow
    monkeypatch.setattr(pair_source, "read_narrow",
                        lambda *a: narrow_reads.append(a) or real(*a))
    args = ["--store", mined["store"], "--sample", "25", "--seed", "3"]
    r = run("report", mined[which], "-o", tmp_path / "new", *args)
    assert r.exit_code == 0, r.output
    assert len(narrow_reads) == 1 and "negative_path" not in narrow_reads[0][2]
    with monkeypatch.context() as m:
        the_old_way(m)
        r_old = run("report", mined[which], "-o", tmp_path / "old", *args)
    assert r_old.exit_code == 0, r_old.output
    assert r.output.splitlines()[0] == r_old.output.splitlines()[0]
    assert page(tmp_path / "new") == page(tmp_path / "old")
    assert {k: v for k, v in digest(tmp_path / "new").items() if k != "index.html"} == {
        k: v for k, v in digest(tmp_path / "old").items() if k != "index.html"}


def test_triplet_summary_and_anchors_against_pandas(mined, tmp_path):
    r = run("report", mined["triplet"], "-o", tmp_path / "rep", "--store", mined["store"],
            "--sample", "20", "--seed", "5")
    assert r.exit_code == 0, r.output
    data = page(tmp_path / "rep")
    (sec,) = data["sections"]
    s, items = sec["summary"], data["items"]
    t = pd.read_parquet(mined["triplet"])
    neg = t[t["negative_id"] >= 0]
    assert s["rows"] == len(t) and s["anchors"] == t["anchor_id"].nunique()
    assert s["negatives"] == len(neg) and s["flagged"] == int(neg["false_negative"].sum())
    pos = t.loc[t["positive_id"] >= 0, ["anchor_id", "positive_id"]].drop_duplicates()
    assert s["positives"] == len(pos)
    assert s["scores"]["negative"]["n"] == int((~neg["false_negative"]).sum())
    assert s["scores"]["negative"]["median"] == pytest.approx(
        float(neg.loc[~neg["false_negative"], "neg_score"].median()))
    anchors = np.unique(t["anchor_id"])
    want = np.sort(np.random.default_rng(5).choice(anchors, size=20, replace=False))
    assert [items[b["a"]]["id"] for b in sec["anchors"]] == want.tolist()
    for block in sec["anchors"]:
        rows = neg[neg["anchor_id"] == items[block["a"]]["id"]].sort_values(
            "neg_rank", kind="stable")
        assert len(rows) == 70
        assert [items[n[0]]["id"] for n in block["n"]] == rows["negative_id"].tolist()[
            :MAX_NEGATIVES_SHOWN]
        assert [n[3] for n in block["n"]] == rows["false_negative"].astype(int).tolist()[
            :MAX_NEGATIVES_SHOWN]
        assert block["more"] == 70 - MAX_NEGATIVES_SHOWN
        assert items[block["a"]]["path"] == rows["anchor_path"].iat[0]


def test_the_store_check_of_a_narrow_read_says_what_the_whole_table_said(mined, tmp_path,
                                                                        monkeypatch):
    t = pd.read_parquet(mined["triplet"])
    other = random_store(tmp_path / "other", n_sources=60, seed=1)  # same paths, other vectors
    moved = t.drop(columns=["store_id"]).assign(negative_path="x/elsewhere.jpg")
    moved.to_parquet(tmp_path / "moved.parquet", index=False, row_group_size=500)
    cases = [(mined["triplet"], other.root), (tmp_path / "moved.parquet", mined["store"])]
    for table, store in cases:
        r = run("report", table, "-o", tmp_path / "rep", "--store", store)
        with monkeypatch.context() as m:
            the_old_way(m)
            r_old = run("report", table, "-o", tmp_path / "rep", "--store", store)
        assert r.exit_code == r_old.exit_code == 1
        assert r.output == r_old.output and r.output.startswith("error: ")
    assert "another store" in json.dumps(run("report", mined["triplet"], "-o", tmp_path / "r",
                                             "--store", other.root).output)
    assert "x/elsewhere.jpg" in r.output
    # found next to the table without --store: the same store as the whole table finds
    r = run("report", tmp_path / "moved.parquet", "-o", tmp_path / "rep2")
    with monkeypatch.context() as m:
        the_old_way(m)
        r_old = run("report", tmp_path / "moved.parquet", "-o", tmp_path / "rep3")
    assert r.exit_code == r_old.exit_code == 0
    assert page(tmp_path / "rep2")["sections"] == page(tmp_path / "rep3")["sections"]


def test_an_empty_parquet_pair_table_and_one_without_paths(mined, tmp_path, monkeypatch):
    t = pd.read_parquet(mined["triplet"])
    t.iloc[:0].to_parquet(tmp_path / "empty.parquet", index=False)
    t.drop(columns=["anchor_path", "positive_path", "negative_path"]).to_parquet(
        tmp_path / "ids.parquet", index=False)
    for name in ("empty.parquet", "ids.parquet"):
        r = run("report", tmp_path / name, "-o", tmp_path / f"new-{name}", "--store",
                mined["store"], "--sample", "7")
        with monkeypatch.context() as m:
            the_old_way(m)
            r_old = run("report", tmp_path / name, "-o", tmp_path / f"old-{name}", "--store",
                        mined["store"], "--sample", "7")
        assert r.exit_code == r_old.exit_code == 0, (r.output, r_old.output)
        assert page(tmp_path / f"new-{name}") == page(tmp_path / f"old-{name}")
    assert page(tmp_path / "new-empty.parquet")["sections"][0]["summary"]["rows"] == 0


def test_a_kept_index_and_a_missing_store_id_read_narrow_as_whole(mined, tmp_path,
                                                                  monkeypatch):
    """A table pandas wrote with its (filtered) index holds ``__index_level_0__``, which
    is no column of the table; a row without a store_id names no other store: the narrow
    read gives the page the whole table gives."""
    t = pd.read_parquet(mined["triplet"])
    t = t[t.index % 2 == 0].astype({"store_id": object})
    t.index = pd.Index(np.arange(len(t))[::-1] * 2)  # no range index: written as a column
    t.loc[t.index[0], "store_id"] = None
    t.to_parquet(tmp_path / "kept.parquet")  # the index kept as a column
    import pyarrow.parquet as pq

    assert "__index_level_0__" in pq.read_schema(tmp_path / "kept.parquet").names
    args = ["--store", mined["store"], "--sample", "10", "--seed", "1"]
    r = run("report", tmp_path / "kept.parquet", "-o", tmp_path / "new", *args)
    assert r.exit_code == 0, r.output
    with monkeypatch.context() as m:
        the_old_way(m)
        r_old = run("report", tmp_path / "kept.parquet", "-o", tmp_path / "old", *args)
    assert r_old.exit_code == 0, r_old.output
    assert page(tmp_path / "new") == page(tmp_path / "old")


def test_parts_with_other_columns_are_refused_by_name(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    a = pd.DataFrame({"anchor_id": [0], "positive_id": [1], "negative_id": [2],
                      "score": [0.5]})
    a.to_parquet(folder / "part-0.parquet", index=False)
    a.rename(columns={"score": "margin"}).to_parquet(folder / "part-1.parquet", index=False)
    with pytest.raises(PairkitError, match="part-1.parquet has other columns than "
                                           "part-0.parquet"):
        inputs_module.read_input(str(folder))
