"""Tables: formats by extension, stdin/stdout JSON Lines, atomic no-overwrite writes."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from pairkit.core.tables import read_table, write_table
from pairkit.errors import PairkitError


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_round_trip(tmp_path, ext):
    df = pd.DataFrame({"a": [1, 2], "b": ["x", "ü"], "c": [0.5, np.nan]})
    path = tmp_path / f"t.{ext}"
    write_table(df, path)
    back = read_table(path)
    assert back["a"].tolist() == [1, 2]
    assert back["b"].tolist() == ["x", "ü"]
    assert back["c"].iloc[0] == 0.5 and pd.isna(back["c"].iloc[1])


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_names_with_line_breaks_round_trip(tmp_path, ext):
    """Issue 20.4: a CSV cell holding a bare carriage return was written unquoted and read
    back as a line end, which shifted every later column of that row."""
    df = pd.DataFrame({"id": [0, 1, 2], "path": ["a\r.png", "b\n.png", None],
                       "store_id": ["s", "s", "s"], "keep": [True, False, True],
                       "score": [0.5, np.nan, 1.0]})
    path = tmp_path / f"t.{ext}"
    write_table(df, path)
    back = read_table(path)
    assert back["id"].tolist() == [0, 1, 2]
    assert back["path"].tolist()[:2] == ["a\r.png", "b\n.png"] and pd.isna(back["path"][2])
    assert back["store_id"].tolist() == ["s"] * 3 and back["keep"].tolist() == [True, False, True]
    assert back["score"][0] == 0.5 and pd.isna(back["score"][1])


def test_refuses_overwrite_and_keeps_old(tmp_path):
    path = tmp_path / "t.csv"
    write_table(pd.DataFrame({"a": [1]}), path)
    with pytest.raises(PairkitError, match="--force"):
        write_table(pd.DataFrame({"a": [2]}), path)
    assert read_table(path)["a"].tolist() == [1]
    write_table(pd.DataFrame({"a": [2]}), path, force=True)
    assert read_table(path)["a"].tolist() == [2]
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]  # no temp files left


def test_stdout_and_stdin(monkeypatch, capsys):
    write_table(pd.DataFrame({"a": [1, 2], "b": [np.float32(0.25), np.nan]}), "-")
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x) for x in lines] == [{"a": 1, "b": 0.25}, {"a": 2, "b": None}]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    assert read_table("-")["a"].tolist() == [1, 2]


def piped(monkeypatch, data: bytes) -> None:
    """``data`` as the bytes on stdin, as a pipe gives them (``sys.stdin.buffer``)."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))


def test_stdin_takes_csv_and_parquet_as_well_as_json_lines(tmp_path, monkeypatch):
    """Found by the pipes-and-Ray hunt (2026-12-07): ``cat pairs.parquet | pairkit train
    --pairs -`` (or a CSV, ``aws s3 cp s3://b/pairs.csv -``) was refused with a JSON error
    that did not say why ("line 1 is not JSON ('utf-8' codec can't decode byte 0xe0 ...)").
    Stdin's format is told by its content: parquet's magic bytes, a JSON object's brace,
    else CSV; each reads as the file of that format does."""
    df = pd.DataFrame({"anchor_id": [0, 1], "anchor_path": ["007", "a b.png"],
                       "label": ["01", None], "neg_score": [0.25, np.nan]})
    seen = []
    for name in ("t.parquet", "t.csv", "t.jsonl"):
        write_table(df, tmp_path / name)
        want = read_table(tmp_path / name)
        piped(monkeypatch, (tmp_path / name).read_bytes())
        got = read_table("-", first_row=seen.append)
        pd.testing.assert_frame_equal(got, want)
        assert got["anchor_path"].tolist() == ["007", "a b.png"]  # text stays text
    assert [row["anchor_id"] for row in seen] == [0, 0, 0]  # the early check ran on each
    piped(monkeypatch, b"\xef\xbb\xbf" + (tmp_path / "t.csv").read_bytes())  # a BOM
    assert read_table("-")["label"].tolist()[0] == "01"
    piped(monkeypatch, b"PAR1 but cut short")
    with pytest.raises(PairkitError, match="^can't read table stdin \\(parquet\\): "):
        read_table("-")
    piped(monkeypatch, b"[1, 2]\n")  # a JSON array is still refused as JSON Lines
    with pytest.raises(PairkitError, match="line 1 is a JSON array"):
        read_table("-")


def test_a_json_lines_row_cut_short_is_named_by_its_line(tmp_path, monkeypatch):
    """Found by the pipes-and-Ray hunt (2026-12-07): a JSON Lines table whose writer
    stopped mid-row (``head -c``, a producer killed in a pipeline) was refused with
    pandas' words for its chunk, naming stdin ``-`` and a byte offset inside the chunk
    ("can't read table -: No ':' found when decoding object value at position 301"); only
    a bad first line was named by its number. Every line is now."""
    rows = [json.dumps({"anchor_id": i, "anchor_path": f"p{i}.png"}) for i in range(4)]
    text = "\n".join(rows[:3]) + "\n" + rows[3][:20]  # the 4th row cut short
    (tmp_path / "t.jsonl").write_text(text)
    with pytest.raises(PairkitError, match=r"^can't read table \S+t.jsonl: line 4 is not JSON "
                       r"\(Unterminated string starting at: line 1 column 18 \(char 17\)\)$"):
        read_table(tmp_path / "t.jsonl")
    piped(monkeypatch, text.encode())
    with pytest.raises(PairkitError, match=r"^can't read table stdin: line 4 is not JSON "):
        read_table("-")
    piped(monkeypatch, ("\n".join([rows[0], "{oops}", rows[1]]) + "\n").encode())
    with pytest.raises(PairkitError, match=r"^can't read table stdin: line 2 is not JSON "):
        read_table("-")


def test_errors(tmp_path, monkeypatch):
    with pytest.raises(PairkitError, match="can't tell the table format"):
        read_table(tmp_path / "t.xlsx")
    with pytest.raises(PairkitError, match="not found"):
        read_table(tmp_path / "missing.csv")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(PairkitError, match="can't read table"):
        read_table(tmp_path / "bad.parquet")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(PairkitError, match="no table on stdin"):
        read_table("-")


def test_dataset_folder_round_trip(tmp_path):
    """A folder ending in / is a parquet dataset: parts in name order, read as one table;
    written beside and renamed in, replaced only with --force, never a foreign folder."""
    df = pd.DataFrame({"a": np.arange(7), "b": [f"r{i}" for i in range(7)]})
    out = tmp_path / "pairs"
    write_table(df, f"{out}/", part_rows=[3, 0, 4])
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    assert len(pd.read_parquet(out / "part-00000.parquet")) == 3
    pd.testing.assert_frame_equal(read_table(out), df)
    pd.testing.assert_frame_equal(read_table(f"{out}/"), df)
    with pytest.raises(PairkitError, match="--force"):
        write_table(df, f"{out}/")
    write_table(df.iloc[:2], out, force=True)  # an existing folder is a dataset too
    assert read_table(out)["a"].tolist() == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs"]  # no temp folders left
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "a.jpg").write_bytes(b"x")
    with pytest.raises(PairkitError, match="holds other files"):
        write_table(df, foreign, force=True)
    assert (foreign / "a.jpg").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PairkitError, match=r"holds no \.parquet files"):
        read_table(empty)


def test_json_lines_rows_are_bounded(tmp_path, monkeypatch):
    """Issue 20.10: a 3-row items file with 1M keys a row took 97 s and 1 GB to import, and
    one 300 MB line 9 s and 2.5 GB before its error. Both are refused as they are read:
    a row over MAX_COLUMNS keys, a line over MAX_LINE_BYTES."""
    from pairkit.core import tables

    monkeypatch.setattr(tables, "MAX_COLUMNS", 50)
    monkeypatch.setattr(tables, "MAX_LINE_BYTES", 4096)
    wide = tmp_path / "wide.jsonl"
    wide.write_text(json.dumps({"path": "a.jpg"}) + "\n"
                    + json.dumps({f"k{i}": i for i in range(60)}) + "\n")
    with pytest.raises(PairkitError, match=r"wide.jsonl line 2 has 60 keys, more than 50"):
        read_table(wide)
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"path": "x" * 5000}) + "\n")
    with pytest.raises(PairkitError, match=r"long.jsonl line 1 is longer than 4,096 bytes"):
        read_table(long)


def test_json_lines_are_read_in_chunks_and_checked_first(tmp_path, monkeypatch):
    """The first row is handed to ``first_row`` before the rest is parsed (train refuses
    another store's table from its first line), and chunked reading equals one read."""
    from pairkit.core import tables

    monkeypatch.setattr(tables, "JSONL_CHUNK_ROWS", 3)
    rows = [{"store_id": "s", "anchor_id": i, "score": None if i == 4 else i / 2,
             "path": f"p{i}"} for i in range(10)]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    back = read_table(path)
    whole = tables.read_jsonl_frame(path.read_bytes())  # one parse of the whole file
    pd.testing.assert_frame_equal(back, whole)
    assert back["anchor_id"].tolist() == list(range(10)) and back["path"].iloc[9] == "p9"
    seen = []
    read_table(path, first_row=seen.append)
    assert seen == [rows[0]]
    path.write_text(json.dumps(rows[0]) + "\n" + "{broken\n" * 1000)

    def refuse(row):
        raise PairkitError(f"other store {row['store_id']}")

    with pytest.raises(PairkitError, match="other store s"):
        read_table(path, first_row=refuse)
    for ext, write in (("csv", lambda df, p: df.to_csv(p, index=False)),
                       ("parquet", lambda df, p: df.to_parquet(p))):
        p = tmp_path / f"t.{ext}"
        write(pd.DataFrame(rows), p)
        seen = []
        read_table(p, first_row=seen.append)
        assert seen[0]["store_id"] == "s" and seen[0]["anchor_id"] == 0


def test_text_columns_are_read_as_written(tmp_path):
    """Found by a CLI bug hunt (2026-12-06): CSV and JSON Lines were read with pandas' type
    guessing, so labels "01" and "1" became one class "1.0", and a path "007" was stored as
    "7.0". The text columns of pairkit's tables (path, source, label, ``*_path``, ...) are
    kept as they are written; a JSON number there is its own text ("1", not "1.0")."""
    (tmp_path / "t.csv").write_text("path,label,x\n007,01,1\n1e3,1,2\nc.png,,3\n")
    back = read_table(tmp_path / "t.csv")
    assert back["path"].tolist() == ["007", "1e3", "c.png"]
    assert back["label"].tolist()[:2] == ["01", "1"] and pd.isna(back["label"].iloc[2])
    assert back["x"].tolist() == [1, 2, 3]
    lines = [{"anchor_path": "007", "label": "01", "anchor_id": 1, "score": 0.5},
             {"anchor_path": "1e3", "label": 1, "anchor_id": 2, "score": 1.0},
             {"anchor_path": "x", "label": None, "anchor_id": 3, "score": 2.5}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    back = read_table(tmp_path / "t.jsonl")
    assert back["anchor_path"].tolist() == ["007", "1e3", "x"]
    assert back["label"].tolist()[:2] == ["01", "1"] and pd.isna(back["label"].iloc[2])
    assert back["anchor_id"].tolist() == [1, 2, 3]
    assert back["score"].tolist() == [0.5, 1.0, 2.5]
    # a content id of digits only keeps its leading zero (train compares it as text)
    (tmp_path / "id.csv").write_text("store_id,anchor_id\n0123456789012345,4\n")
    assert read_table(tmp_path / "id.csv")["store_id"].tolist() == ["0123456789012345"]
    # a label column of JSON integers with a null is not turned into floats
    (tmp_path / "n.jsonl").write_text('{"path": "a", "label": 3}\n{"path": "b", "label": null}\n')
    back = read_table(tmp_path / "n.jsonl")
    assert back["label"].tolist()[0] == "3" and pd.isna(back["label"].iloc[1])


def test_parquet_text_columns_are_text_as_in_the_other_formats(tmp_path):
    """Found by a bug hunt (2026-12-06): a parquet labels file with integer labels and one
    missing gave labels "1.0", "2.0" (pandas holds such a column as floats) where the same
    rows as CSV or JSON Lines gave "1", "2"; also in a table folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"path": ["a", "b", "c", "d"],
                      "label": pa.array([1, 2, None, 3], pa.int64()),
                      "anchor_id": pa.array([1, 2, 3, 4], pa.int64()),
                      "source": pa.array([1.5, 2.0, None, 7.0])})
    pq.write_table(table, tmp_path / "t.parquet")
    (tmp_path / "d").mkdir()
    pq.write_table(table, tmp_path / "d" / "part-00000.parquet")
    for path in (tmp_path / "t.parquet", tmp_path / "d"):
        back = read_table(path)
        assert back["label"].tolist()[:2] == ["1", "2"] and pd.isna(back["label"].iloc[2])
        assert back["label"].iloc[3] == "3"
        assert back["source"].tolist()[:2] == ["1.5", "2"] and pd.isna(back["source"].iloc[2])
        assert back["anchor_id"].tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("ext", ["parquet", "jsonl", "csv", "dataset"])
def test_integer_labels_above_two_to_the_53_keep_every_digit(tmp_path, ext):
    """Found by a bug hunt (hunt-l 5): integer labels or sources above 2**53 with a missing
    one were rounded in parquet and JSON Lines (pandas held the column as float64), so
    9007199254740993 and 9007199254740992 became one class; CSV read them right."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    big = [9007199254740993, 9007199254740992, None, 3]
    paths = ["a.png", "b.png", "c.png", "d.png"]
    path = tmp_path / f"t.{ext}"
    if ext in ("parquet", "dataset"):
        table = pa.table({"path": paths, "label": pa.array(big, pa.int64()),
                          "source": pa.array(big, pa.uint64()), "n": [1, 2, 3, 4]})
        if ext == "dataset":
            path.mkdir()
            pq.write_table(table, path / "part-00000.parquet")
        else:
            pq.write_table(table, path)
    elif ext == "jsonl":
        path.write_text("".join(json.dumps({"path": p, "label": v, "source": v, "n": i}) + "\n"
                                for i, (p, v) in enumerate(zip(paths, big, strict=True), 1)))
    else:
        path.write_text("path,label,source,n\n" + "".join(
            f"{p},{'' if v is None else v},{'' if v is None else v},{i}\n"
            for i, (p, v) in enumerate(zip(paths, big, strict=True), 1)))
    back = read_table(path)
    for col in ("label", "source"):
        values = back[col].tolist()
        assert values[0] == "9007199254740993" and values[1] == "9007199254740992"
        assert pd.isna(values[2]) and values[3] == "3"
    assert back["n"].tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("line, kind", [('[{"path": "a"}, {"path": "b"}]', "a JSON array"),
                                        ("3", "a JSON number"), ('"a.png"', "a JSON string"),
                                        ("null", "JSON null")])
def test_json_lines_line_that_is_not_an_object_is_refused(tmp_path, line, kind):
    """Found by a bug hunt (hunt-l 9): a .json table holding one JSON array (pandas'
    ``to_json(orient="records")``) was read as one row with one column per element,
    past the 10,000-column bound; train then printed a 129 KB error. A line that is not
    one JSON object is refused in one line naming the table and the line, on any line."""
    path = tmp_path / "t.json"
    path.write_text(line + "\n")
    with pytest.raises(PairkitError, match=rf"t.json line 1 is {kind}, not one JSON object "
                                           r"per line \(JSON Lines\)"):
        read_table(path)
    path.write_text('{"path": "a"}\n' + line + "\n")
    with pytest.raises(PairkitError, match=rf"t.json line 2 is {kind}"):
        read_table(path)


def test_dataset_folders_of_spark_pyarrow_and_ray_data_are_read(tmp_path):
    """Found by a bug hunt (hunt-l 8): the docs said Spark and Ray Data folders are read,
    but only ``part-NNNNN.parquet`` names were: Spark's ``part-00000-UUID-c000.snappy
    .parquet`` (with ``_SUCCESS``), pyarrow's ``part-0.parquet`` and Ray Data's
    ``HEX_000000_000000.parquet`` were refused. A folder's parts are its ``.parquet``
    files whose names start with neither ``.`` nor ``_``, in name order with numbers
    compared as numbers (``part-100000`` after ``part-99999``)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    df = pd.DataFrame({"anchor_id": np.arange(120), "path": [f"p{i}" for i in range(120)]})
    spark = tmp_path / "spark"
    spark.mkdir()
    uuid = "1b2c3d4e-5f60-4718-9a0b-c1d2e3f40516"
    for i, start in enumerate(range(0, 120, 50)):
        df.iloc[start:start + 50].to_parquet(
            spark / f"part-{i:05d}-{uuid}-c000.snappy.parquet", index=False)
    (spark / "_SUCCESS").write_bytes(b"")
    (spark / f".part-00000-{uuid}-c000.snappy.parquet.crc").write_bytes(b"crc")
    (spark / "_common_metadata.parquet").write_bytes(b"not a part")
    (spark / ".t.parquet.1a2b3c4d.tmp").write_bytes(b"a pairkit temp file")
    pd.testing.assert_frame_equal(read_table(spark), df)
    arrow = tmp_path / "arrow"  # part-0.parquet ... part-11.parquet: 10 after 9
    ds.write_dataset(pa.Table.from_pandas(df, preserve_index=False), arrow, format="parquet",
                     max_rows_per_file=10, max_rows_per_group=10)
    assert "part-11.parquet" in {p.name for p in arrow.iterdir()}
    pd.testing.assert_frame_equal(read_table(f"{arrow}/"), df)
    ray = tmp_path / "ray"
    ray.mkdir()
    for i, start in enumerate(range(0, 120, 40)):
        df.iloc[start:start + 40].to_parquet(ray / f"3f9a1c_{i:06d}_000000.parquet",
                                             index=False)
    pd.testing.assert_frame_equal(read_table(ray), df)
    wide = tmp_path / "wide"  # six-digit numbers sort after five-digit ones
    wide.mkdir()
    df.iloc[:60].to_parquet(wide / "part-99999.parquet", index=False)
    df.iloc[60:].to_parquet(wide / "part-100000.parquet", index=False)
    pd.testing.assert_frame_equal(read_table(wide), df)


def test_a_store_or_a_folder_without_parquet_files_is_no_table(tmp_path):
    from pairkit.core.tables import dataset_parts

    store = tmp_path / "st"
    store.mkdir()
    (store / "manifest.json").write_text("{}")
    pd.DataFrame({"id": [0], "path": ["a"]}).to_parquet(store / "items-00000.parquet")
    with pytest.raises(PairkitError, match=r"table folder .*st is a store \(it holds "
                                           r"manifest.json\), not a table"):
        read_table(store)
    only_hidden = tmp_path / "h"
    only_hidden.mkdir()
    (only_hidden / "_SUCCESS").write_bytes(b"")
    (only_hidden / ".x.parquet").write_bytes(b"")
    (only_hidden / "notes.txt").write_bytes(b"")
    with pytest.raises(PairkitError, match=r"table folder .*h holds no \.parquet files"):
        dataset_parts(only_hidden)


def test_csv_strings_like_na_are_text_and_only_an_empty_cell_is_missing(tmp_path):
    """A label "NA" (Namibia), "None" or "null", or a path "NA", is that text: pandas'
    default missing-value strings are off, only an empty cell is missing."""
    from pairkit.core.tables import read_csv_frame

    data = b"path,label,note\nNA,NA,N/A\nb.png,None,nan\nc.png,null,x\nd.png,,\n"
    df = read_csv_frame(io.BytesIO(data))
    assert df["path"].tolist() == ["NA", "b.png", "c.png", "d.png"]
    assert df["label"].tolist()[:3] == ["NA", "None", "null"]
    assert df["note"].tolist()[:3] == ["N/A", "nan", "x"]
    assert pd.isna(df["label"][3]) and pd.isna(df["note"][3])
    assert df.isna().sum().tolist() == [0, 1, 1]
    (tmp_path / "t.csv").write_bytes(data)
    pd.testing.assert_frame_equal(read_table(tmp_path / "t.csv"), df)
