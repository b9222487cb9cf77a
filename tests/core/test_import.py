"""pairkit import: embeddings computed elsewhere become a store."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store

runner = CliRunner()


def _write(tmp_path, x, items):
    np.save(tmp_path / "emb.npy", x)
    items.to_csv(tmp_path / "items.csv", index=False)


def test_import_normalises_and_keeps_columns(tmp_path):
    x = np.array([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]], dtype=np.float32)
    items = pd.DataFrame({"path": ["a.jpg", "a.jpg", "b.jpg"], "view": [0, 1, 0],
                          "label": ["cat", "cat", "dog"]})
    _write(tmp_path, x, items)
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s"),
                                 "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert "L2-normalised" in result.output
    store = Store.open(tmp_path / "s")
    np.testing.assert_allclose(store.vectors(), [[0.6, 0.8], [0, 1], [1, 0]], atol=1e-6)
    assert store.labels().tolist() == ["cat", "cat", "dog"]
    assert store.items["view"].tolist() == [0, 1, 0]
    # the views per source the manifest records, as embed's (hunt 3b: one less survived)
    assert store.manifest["views"] == 2


def test_import_rejects_nan_rows(tmp_path):
    x = np.ones((4, 3), dtype=np.float32)
    x[2, 1] = np.nan
    x[3, 0] = np.inf
    _write(tmp_path, x, pd.DataFrame({"path": list("abcd")}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1
    assert "2 rows contain NaN or inf (rows 2, 3)" in result.output
    assert not (tmp_path / "s").exists()
    x[3, 0] = 1.0
    _write(tmp_path, x, pd.DataFrame({"path": list("abcd")}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1 and "error: 1 row contains NaN or inf (row 2);" in result.output


@pytest.mark.parametrize("zero_rows, message", [
    ([0, 1, 2], "error: 3 rows are all zeros (rows 0, 1, 2): no direction"),
    ([1], "error: 1 row is all zeros (row 1): no direction"),
    (list(range(7)), "error: 7 rows are all zeros (rows 0, 1, 2, 3, 4 ...): no direction"),
])
def test_import_names_the_zero_rows_as_the_nan_rows(tmp_path, zero_rows, message):
    """Found by a docs hunt (hunt-c): '3 rows are all zeros (row 0)' named only the first."""
    x = np.ones((8, 2), dtype=np.float32)
    x[zero_rows] = 0.0
    _write(tmp_path, x, pd.DataFrame({"path": [f"{i}.jpg" for i in range(8)]}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1
    assert message in result.output, result.output
    assert not (tmp_path / "s").exists()


def test_import_row_mismatch_and_missing_path(tmp_path):
    _write(tmp_path, np.ones((3, 2), dtype=np.float32), pd.DataFrame({"path": ["a", "b"]}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1 and "has 3 rows but" in result.output
    _write(tmp_path, np.ones((2, 2), dtype=np.float32), pd.DataFrame({"file": ["a", "b"]}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1 and "need a 'path' column" in result.output


def test_two_imports_of_one_encoder_are_comparable(tmp_path):
    """Train and test embeddings computed elsewhere, imported from two .npy files with one
    --encoder: eval --against accepts them; another --encoder name is refused."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 8))
    for name, n in (("train", 60), ("test", 30)):
        y = np.arange(n) % 3
        x = (centers[y] + 0.3 * rng.normal(size=(n, 8))).astype(np.float32)
        np.save(tmp_path / f"{name}.npy", x)
        pd.DataFrame({"path": [f"{name}/{i}.jpg" for i in range(n)],
                      "label": [f"c{v}" for v in y]}).to_csv(tmp_path / f"{name}.csv",
                                                             index=False)
    for name, encoder in (("train", "my-vit"), ("test", "my-vit"), ("other", "clip")):
        src = "test" if name == "other" else name
        r = runner.invoke(app, ["import", str(tmp_path / f"{src}.npy"), "--items",
                                str(tmp_path / f"{src}.csv"), "-o", str(tmp_path / name),
                                "--encoder", encoder])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["eval", str(tmp_path / "train"), "--against",
                            str(tmp_path / "test"), "--json", "-q", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    import json

    assert json.loads(r.stdout)["knn_top1"] > 0.9
    r = runner.invoke(app, ["eval", str(tmp_path / "train"), "--against",
                            str(tmp_path / "other"), "--json", "-q"])
    assert r.exit_code == 1 and "different encoders are not comparable" in r.output


def _import(tmp_path, x, out="s"):
    _write(tmp_path, x, pd.DataFrame({"path": [f"{i}.jpg" for i in range(len(x))]}))
    return runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                               str(tmp_path / "items.csv"), "-o", str(tmp_path / out),
                               "--dtype", "float32"])


def test_import_of_huge_and_tiny_values_keeps_directions(tmp_path):
    """Issue 20.1: rows scaled by 1e38 overflowed the norm (and 1e-30 underflowed it), so
    the store held zero vectors; they must come out as the unit rows of the unscaled data."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(20, 8))
    expected = base / np.linalg.norm(base, axis=1, keepdims=True)
    for k, (scale, dtype) in enumerate([(1e38, np.float32), (1e-30, np.float32),
                                        (1e300, np.float64)]):
        x = (base * scale).astype(dtype)
        result = _import(tmp_path, x, out=f"s{k}")
        assert result.exit_code == 0, result.output
        assert "Warning" not in result.output
        got = Store.open(tmp_path / f"s{k}").vectors()
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_import_refuses_complex_and_folders(tmp_path):
    result = _import(tmp_path, np.ones((3, 2), dtype=np.complex64))
    assert result.exit_code == 1
    assert "complex64, expected real numbers" in result.output
    assert not (tmp_path / "s").exists()
    (tmp_path / "st").mkdir()
    result = runner.invoke(app, ["import", str(tmp_path / "st"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "x")])
    assert result.exit_code == 1
    assert "is a folder" in result.output


def test_import_keeps_labels_and_paths_as_written(tmp_path):
    """Found by a CLI bug hunt (2026-12-06): labels "01" and "1" were read as one number
    and stored as "1.0" (two classes merged), a path "007" as "7.0"."""
    x = np.eye(4, dtype=np.float32) + 0.1
    (tmp_path / "items.csv").write_text("path,label\n007,01\nb.png,1\nc.png,2\nd.png,\n")
    np.save(tmp_path / "emb.npy", x)
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    store = Store.open(tmp_path / "s")
    assert store.items["path"].tolist() == ["007", "b.png", "c.png", "d.png"]
    assert store.labels().tolist()[:3] == ["01", "1", "2"] and pd.isna(store.labels()[3])


@pytest.mark.parametrize("view, shown", [("x", "'x'"), ("70000", "'70000'"), ("1.5", "'1.5'"),
                                         ("-1", "'-1'"), ("", "'nan'")])
def test_import_refuses_a_view_that_is_not_a_small_whole_number(tmp_path, view, shown):
    """Found by a CLI bug hunt (2026-12-06): 'x' ended in an internal error, 70000 was
    stored as 4464 (int16 wrapped) and 1.5 as 1, with the manifest's view count beside."""
    np.save(tmp_path / "emb.npy", np.eye(3, dtype=np.float32) + 0.1)
    (tmp_path / "items.csv").write_text(f"path,view\na.png,0\na.png,1\nb.png,{view}\n")
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1, result.output
    assert f"row 2 holds {shown}" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_import_an_empty_source_cell_is_the_path(tmp_path):
    """Found by a bug hunt (2026-12-06): an empty ``source`` cell was stored as missing,
    ``info`` counted one source too few and ``mine`` stopped with an internal error. A
    source defaults to the path, a missing one too."""
    np.save(tmp_path / "e.npy", np.random.default_rng(0).normal(size=(4, 3)).astype("f4"))
    (tmp_path / "items.csv").write_text("path,source,view\na.png,a.png,0\nb.png,a.png,1\n"
                                        "c.png,,0\nd.png,d.png,0\n")
    result = runner.invoke(app, ["import", str(tmp_path / "e.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    store = Store.open(tmp_path / "s")
    assert store.items["source"].tolist() == ["a.png", "a.png", "c.png", "d.png"]
    result = runner.invoke(app, ["mine", str(tmp_path / "s"), "--hard", "-k", "1", "-o",
                                 str(tmp_path / "p.jsonl")])
    assert result.exit_code == 0, result.output


def test_import_names_an_npz_archive_and_a_text_file(tmp_path):
    """Found by a bug hunt (2026-12-06): an .npz archive was an internal error, a CSV
    passed as the embeddings gave numpy's advice to load pickles."""
    (tmp_path / "items.csv").write_text("path\na\nb\nc\nd\n")
    np.savez(tmp_path / "z.npz", a=np.ones((4, 3)))
    for name, said in (("z.npz", "is an .npz archive, expected a .npy file"),
                       ("items.csv", "is not a .npy file (no NumPy header)")):
        result = runner.invoke(app, ["import", str(tmp_path / name), "--items",
                                     str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
        assert result.exit_code == 1 and said in result.output, result.output
        assert "internal error" not in result.output and "pickle" not in result.output


@pytest.mark.parametrize("name", ["", "bad\nname", "esc\x1b[31m", "tab\there"])
def test_import_refuses_an_encoder_name_that_is_not_printable(tmp_path, name):
    """Found by a bug hunt (2026-12-06): control characters of --encoder went into the
    manifest as they were (a newline split `info`'s line, an escape coloured a terminal);
    an empty name is no name. Refused as usage, before anything is written."""
    _write(tmp_path, np.eye(3, dtype=np.float32), pd.DataFrame({"path": ["a", "b", "c"]}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s"),
                                 "--encoder", name])
    assert result.exit_code == 2, result.output
    assert "--encoder must be a printable name" in result.output
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_import_an_empty_label_is_no_label_in_every_format(tmp_path, suffix):
    """Found by a bug hunt (2026-12-06): an empty label was a class of its own in parquet
    and JSON Lines, no label in CSV (whose empty cell is missing): one table, two stores."""
    np.save(tmp_path / "e.npy", np.random.default_rng(0).normal(size=(3, 3)).astype("f4"))
    items = pd.DataFrame({"path": ["a.png", "b.png", "c.png"],
                          "label": pd.array(["x", "", None], dtype="string")})
    f = tmp_path / f"items{suffix}"
    if suffix == ".csv":
        items.to_csv(f, index=False)
    elif suffix == ".jsonl":
        items.to_json(f, orient="records", lines=True)
    else:
        items.to_parquet(f, index=False)
    result = runner.invoke(app, ["import", str(tmp_path / "e.npy"), "--items", str(f), "-o",
                                 str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    labels = Store.open(tmp_path / "s").items["label"]
    assert labels.iloc[0] == "x" and labels.iloc[1:].isna().all()


@pytest.mark.parametrize("failure", ["disk full", KeyboardInterrupt])
def test_import_force_keeps_the_old_store_when_the_new_one_fails(tmp_path, monkeypatch,
                                                                 failure):
    """Found by a bug hunt (hunt-n 1): import --force emptied the old store before it wrote
    the new one, so Ctrl-C or a full disk in the shard's write lost it. The old store now
    stays until the new one commits."""
    import errno

    from pairkit.core import store_writer

    _write(tmp_path, np.eye(3, dtype=np.float32), pd.DataFrame({"path": ["a", "b", "c"]}))
    args = ["import", str(tmp_path / "emb.npy"), "--items", str(tmp_path / "items.csv"),
            "-o", str(tmp_path / "s"), "-q"]
    assert runner.invoke(app, args).exit_code == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()}
    np.save(tmp_path / "emb.npy", np.ones((3, 5), np.float32))
    real = store_writer.write_shard

    def stopped(root, name, vectors, dtype):
        if failure is KeyboardInterrupt:
            raise KeyboardInterrupt
        with store_writer.atomic_path(root / name):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_writer, "write_shard", stopped)
    result = runner.invoke(app, [*args, "--force"])
    assert result.exit_code == (130 if failure is KeyboardInterrupt else 1), result.output
    if failure is not KeyboardInterrupt:
        assert "disk full while writing" in result.output
    assert {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()} == before
    assert Store.open(tmp_path / "s").dim == 3
    monkeypatch.setattr(store_writer, "write_shard", real)
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0
    assert Store.open(tmp_path / "s").dim == 5


def test_bad_rows_are_numbered_in_the_whole_array_past_the_first_block():
    """bad_rows streams blocks; the rows it names are the array's, not the block's
    (hunt 3b: zero rows numbered within their block survived; every test array fitted
    one block of 8,192)."""
    from pairkit.core.importer import bad_rows

    x = np.ones((7, 2))
    x[[1, 5], :] = 0.0
    x[4, 1] = np.nan
    nonfinite, overflow, underflow, zero = bad_rows(x, block=3)
    assert nonfinite.tolist() == [4] and zero.tolist() == [1, 5]
    assert overflow.tolist() == [] and underflow.tolist() == []


def test_import_reads_a_binary_path_column_as_its_text_and_refuses_nested_values(tmp_path):
    """Found by a bug hunt (2026-12-07): a parquet item table whose path column is binary
    (UTF-8 bytes, as some writers store strings) was imported with the paths
    ``b'a.png'`` (the bytes' Python repr), and a JSON Lines path that is an array as
    ``['a', 0]``: exit 0, every item path changed."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    np.save(tmp_path / "emb.npy", np.eye(3, dtype=np.float32))
    pq.write_table(pa.table({"path": pa.array([b"a.png", b"b/c.png", "\u00e9.png".encode()],
                                              pa.binary()),
                             "label": pa.array([b"cat", None, b"dog"], pa.binary())}),
                   tmp_path / "items.parquet")

    def run(items: str, out: str):  # noqa: ANN202
        return runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                   str(tmp_path / items), "-o", str(tmp_path / out)])

    r = run("items.parquet", "s")
    assert r.exit_code == 0, r.output
    store = Store.open(tmp_path / "s")
    assert store.items["path"].tolist() == ["a.png", "b/c.png", "\u00e9.png"]
    assert store.labels().tolist() == ["cat", None, "dog"]
    pq.write_table(pa.table({"path": pa.array([b"a.png", b"\xff.png", b"c"], pa.binary())}),
                   tmp_path / "bad.parquet")
    r = run("bad.parquet", "s2")
    assert r.exit_code == 1 and "column 'path' holds bytes that are not UTF-8 text" in r.output
    (tmp_path / "nested.jsonl").write_text("".join(
        json.dumps({"path": p}) + "\n" for p in ["a.png", ["b", 1], "c.png"]))
    r = run("nested.jsonl", "s3")
    assert r.exit_code == 1 and "column 'path' holds lists, not text" in r.output
    assert not (tmp_path / "s2").exists() and not (tmp_path / "s3").exists()


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_import_an_item_table_with_a_utf8_bom(tmp_path, suffix):
    """Found by a bug hunt (2026-12-07): an item table saved with a UTF-8 byte order mark
    (Windows editors, PowerShell's UTF8 encoding) was read as CSV but refused as JSON
    Lines with pandas' "Expected object or value at position 0"."""
    np.save(tmp_path / "emb.npy", np.eye(2, dtype=np.float32))
    text = ("path,label\na.png,cat\nb.png,dog\n" if suffix == "csv" else
            '{"path": "a.png", "label": "cat"}\n{"path": "b.png", "label": "dog"}\n')
    (tmp_path / f"items.{suffix}").write_bytes(b"\xef\xbb\xbf" + text.encode())
    r = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                            str(tmp_path / f"items.{suffix}"), "-o", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    store = Store.open(tmp_path / "s")
    assert store.items["path"].tolist() == ["a.png", "b.png"]
    assert store.labels().tolist() == ["cat", "dog"]


def test_import_says_longdouble_values_overflow_float64_not_nan_or_inf(tmp_path):
    """Found by a bug hunt: a longdouble .npy whose values lie beyond float64's range was
    refused as holding 'NaN or inf' (the file holds neither: the values became inf when
    cast to float64); rows of values below float64's range were 'all zeros'."""
    x = np.ones((5, 2), dtype=np.longdouble)
    x[1, 0] = np.longdouble("1e400")
    x[3, 1] = np.longdouble("-1e4000")
    x[2] = np.longdouble("1e-400")
    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(5)]})
    _write(tmp_path, x, items)
    args = ["import", str(tmp_path / "emb.npy"), "--items", str(tmp_path / "items.csv"),
            "-o", str(tmp_path / "s")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: 2 rows hold values beyond float64's range (rows 1, 3), which overflow to "
        "inf in pairkit's float32/float64 arithmetic; rescale or drop them")
    x[[1, 3]] = 1.0
    _write(tmp_path, x, items)
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: 1 row holds only values below float64's range (row 2), which underflow to "
        "zeros in pairkit's float32/float64 arithmetic; rescale or drop them")
    x[1, 0] = np.nan  # a real NaN in the file is still named as one
    _write(tmp_path, x, items)
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "error: 1 row contains NaN or inf (row 1);" in result.output
    assert not (tmp_path / "s").exists()


def test_import_summary_escapes_control_characters_in_the_output_path(tmp_path):
    """Found by a bug hunt: the summary printed ``-o`` as typed, so a path holding a
    newline or ESC made lines of its own (``error: ...``) or terminal escapes."""
    _write(tmp_path, np.eye(3, dtype=np.float32), pd.DataFrame({"path": list("abc")}))
    out = tmp_path / "s\nerror: forged \x1b[2J"
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"imported 3 rows of dim 3 (L2-normalised) -> {ascii(str(out))}\n"
    assert Store.open(out).count == 3
    plain = tmp_path / "plain é"  # printable text stays as it is
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(plain)])
    assert result.stderr == f"imported 3 rows of dim 3 (L2-normalised) -> {plain}\n"
