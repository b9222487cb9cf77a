"""pairkit mine end to end: formats, streaming, reproducibility, stats and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.pairs import TRIPLET_COLUMNS
from tests.conftest import random_store

runner = CliRunner()


def mine(*args: str):  # noqa: ANN201
    return runner.invoke(app, ["mine", *map(str, args)])


def last_line(result) -> str:  # noqa: ANN001
    return result.output.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("cli") / "store", n_sources=40, views=2,
                        dim=16, classes=4)


def test_triplet_parquet_with_stats(store, tmp_path: Path) -> None:
    out, stats = tmp_path / "p.parquet", tmp_path / "s.json"
    r = mine(store.root, "--hard", "-o", out, "--stats", stats)
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    assert tuple(df.columns) == TRIPLET_COLUMNS
    assert len(df) == 80 * 5 and (df["store_id"] == store.content_id).all()
    assert (df["anchor_path"] == df["positive_path"]).all()  # instance: views of one source
    items = store.items
    assert (items["source"].to_numpy()[df["negative_id"]] !=
            items["source"].to_numpy()[df["anchor_id"]]).all()
    s = json.loads(stats.read_text())
    assert s["anchors"] == 80 and s["rows"] == 400 and s["negatives_per_anchor"]["min"] == 5
    assert "exact" in s["index"] and set(s["removed"]) >= {"self", "positive", "same_source"}
    assert s["neg_score"]["q50"] < s["pos_score"]["q50"]
    assert sum(s["rank_histogram"].values()) == 400
    assert "mined 400 rows (triplet) for 80 anchors" in r.output
    # FAISS flat on a CPU host; the torch search where a GPU is visible (also exact)
    assert ("auto: 80 rows <= 50,000, exact search" in r.output
            or "exact search, FAISS sees no GPU, torch does" in r.output)


def test_same_seed_same_output(store, tmp_path: Path) -> None:
    args = ["--hard", "--sampling", "softmax", "--range-max", "30", "--seed", "5"]
    assert mine(store.root, *args, "-o", tmp_path / "a.csv").exit_code == 0
    assert mine(store.root, *args, "-o", tmp_path / "b.csv").exit_code == 0
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert mine(store.root, "-o", tmp_path / "e1.csv", "--seed", "1").exit_code == 0
    assert mine(store.root, "-o", tmp_path / "e2.csv", "--seed", "1").exit_code == 0
    assert (tmp_path / "e1.csv").read_bytes() == (tmp_path / "e2.csv").read_bytes()
    assert mine(store.root, "-o", tmp_path / "e3.csv", "--seed", "2").exit_code == 0
    assert (tmp_path / "e1.csv").read_bytes() != (tmp_path / "e3.csv").read_bytes()


def test_stdout_json_lines_and_formats(store) -> None:
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-o", "-", "-q",
                            "--format", "labeled-pair", "-k", "3"])
    assert r.exit_code == 0
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 80 * 4
    assert [x["label"] for x in rows[:4]] == [1, 0, 0, 0]
    assert set(rows[0]) == {"store_id", "anchor_id", "other_id", "anchor_path", "other_path",
                            "label", "score"}
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-o", "-", "-q",
                            "--format", "n-tuple", "-k", "3", "--min-score", "0.9"])
    assert r.exit_code == 0
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 80
    short = [x for x in rows if x["negative_id_3"] == -1]  # 70 (35 got at least one: at
    # 0.97 none did, now an error: tests/cli/test_mine.py::test_a_run_in_which_no_anchor...)
    assert short and all(x["negative_path_3"] is None and x["neg_score_3"] is None
                          for x in short)


def test_filter_false_negatives_cli(store, tmp_path: Path) -> None:
    out, stats = tmp_path / "p.jsonl", tmp_path / "s.json"
    r = mine(store.root, "--hard", "--filter-false-negatives", "--fn-rules", "label",
             "-o", out, "--stats", stats)
    assert r.exit_code == 0, r.output
    df = pd.read_json(out, lines=True)
    labels = store.items["label"].to_numpy()
    # no mined positives by default without the mutual-neighbour rule (the relation they
    # are mined by: only that rule keeps them out of the negatives)
    assert "positive_kind" not in df.columns
    assert (labels[df["negative_id"]] != labels[df["anchor_id"]]).all()
    s = json.loads(stats.read_text())
    # every row labelled: the anchor's label is not searched at all (nothing to flag)
    assert s["label_rows_not_searched"] and s["false_negative_rules"] == ["label"]
    assert "(label: rows of the anchor's label were not searched)" in r.output
    r = mine(store.root, "--hard", "--filter-false-negatives", "--fn-rules", "label",
             "--fn-mode", "keep", "--positives", "0", "-o", tmp_path / "k.jsonl")
    df = pd.read_json(tmp_path / "k.jsonl", lines=True)
    assert {"false_negative", "fn_reason"} <= set(df.columns)
    same = labels[df["negative_id"]] == labels[df["anchor_id"]]
    assert (df["false_negative"] == same).all() and same.any()
    assert set(df.loc[df["false_negative"], "fn_reason"]) == {"label"}
    r = mine(store.root, "--hard", "--filter-false-negatives", "--fn-rules", "label,margin",
             "--fn-margin", "0.9", "--fn-mode", "attract", "--format", "labeled-pair",
             "--positives", "0", "-o", tmp_path / "a.jsonl")
    assert r.exit_code == 0, r.output
    df = pd.read_json(tmp_path / "a.jsonl", lines=True)
    extra = df[df["false_negative"]]
    assert len(extra) and (extra["label"] == 1).all()


def test_pairs_relation_cli(store, tmp_path: Path) -> None:
    paths = store.items["path"].drop_duplicates().tolist()
    f = tmp_path / "pairs.csv"
    pd.DataFrame({"anchor": paths[:10] + ["missing.jpg"],
                  "positive": paths[10:20] + [paths[0]]}).to_csv(f, index=False)
    r = mine(store.root, "--hard", "--relation", f"pairs:{f}", "-o", tmp_path / "p.csv")
    assert r.exit_code == 0, r.output
    assert "1 of 11 rows name paths not in the store" in r.output
    df = pd.read_csv(tmp_path / "p.csv")
    assert set(df["anchor_path"]) == set(paths[:10])
    g = tmp_path / "none.csv"
    pd.DataFrame({"anchor": ["x.jpg"], "positive": ["y.jpg"]}).to_csv(g, index=False)
    r = mine(store.root, "--hard", "--relation", f"pairs:{g}", "-o", tmp_path / "q.csv")
    assert r.exit_code == 1 and "none of its 1 rows match" in last_line(r)
    assert not (tmp_path / "q.csv").exists()


def test_pairs_file_rows_with_an_empty_cell_are_said_so(store, tmp_path: Path) -> None:
    """Found by a mine bug hunt (2026-12-07): a pairs row with an empty anchor or positive
    cell was counted as naming a path not in the store, with an empty example ('rows name
    paths not in the store (e.g. ); mined the rest'), and a file whose positive cells were
    all empty was refused as 'none of its 2 rows give a pair of two different store
    items'."""
    paths = store.items["path"].drop_duplicates().tolist()
    f = tmp_path / "pairs.csv"
    f.write_text(f"anchor,positive\n{paths[0]},{paths[1]}\n{paths[2]},\nnope.jpg,{paths[3]}\n")
    r = mine(store.root, "--hard", "--relation", f"pairs:{f}", "-o", tmp_path / "p.csv")
    assert r.exit_code == 0, r.output
    assert ("warning: pairs file: 1 of 3 rows name paths not in the store (e.g. "
            "'nope.jpg'), 1 has an empty anchor or positive cell; mined the rest") in r.output
    g = tmp_path / "empty.csv"
    g.write_text(f"anchor,positive\n{paths[0]},\n{paths[1]},\n")
    r = mine(store.root, "--hard", "--relation", f"pairs:{g}", "-o", tmp_path / "q.csv")
    assert r.exit_code == 1, r.output
    assert last_line(r) == ("error: pairs file: none of its 2 rows match store paths "
                            "(2 have an empty anchor or positive cell)")
    assert not (tmp_path / "q.csv").exists()


def test_saved_index_is_reused(store, tmp_path: Path) -> None:
    assert runner.invoke(app, ["index", str(store.root), "--index", "hnsw", "--force",
                               "-q"]).exit_code == 0
    r = mine(store.root, "--hard", "--index", "hnsw", "-o", tmp_path / "p.csv")
    assert r.exit_code == 0 and "loaded from" in r.output
    r2 = mine(store.root, "--hard", "--index", "flat", "-o", tmp_path / "q.csv")
    a, b = pd.read_csv(tmp_path / "p.csv"), pd.read_csv(tmp_path / "q.csv")
    assert (a["negative_id"] == b["negative_id"]).mean() > 0.95 and r2.exit_code == 0


def test_a_saved_index_built_otherwise_than_asked_is_not_used(store, tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): `mine --index ivf --nlist 4` searched a saved
    index of 2 cells (and `--index hnsw --hnsw-m 8` one of M 32), saying only "loaded"."""
    assert runner.invoke(app, ["index", str(store.root), "--index", "ivf", "--nlist", "2",
                               "--force", "-q"]).exit_code == 0
    r = mine(store.root, "--hard", "--index", "ivf", "--nlist", "4", "-o", tmp_path / "p.csv")
    assert r.exit_code == 0, r.output
    assert "ivf(nlist=4" in r.output and "loaded from" not in r.output
    assert "the saved index has --nlist 2, asked for 4" in r.output
    r = mine(store.root, "--hard", "--index", "ivf", "-o", tmp_path / "q.csv")
    assert "ivf(nlist=2" in r.output and "loaded from" in r.output  # nothing asked otherwise


def test_an_explicit_dtype_float32_does_not_search_a_saved_float16_index(tmp_path) -> None:
    """`mine --dtype float32` searched the float16 index `pairkit index --dtype float16`
    saved (the explicit float32 was taken for the default): it builds a float32 index in
    memory and says why, as for another --nlist; without --dtype the saved one is used."""
    st = random_store(tmp_path / "st", n_sources=40, views=2, dim=8)
    exact = mine(st.root, "--hard", "-o", tmp_path / "exact.csv", "-q")  # no saved index
    assert exact.exit_code == 0, exact.output
    assert runner.invoke(app, ["index", str(st.root), "--dtype", "float16",
                               "-q"]).exit_code == 0
    r = mine(st.root, "--hard", "--dtype", "float32", "-o", tmp_path / "p.csv", "-q",
             "--stats", tmp_path / "s.json")
    assert r.exit_code == 0, r.output
    text = json.loads((tmp_path / "s.json").read_text())["index"]
    assert text == ("flat on CPU, built now (auto: 80 rows <= 50,000, exact search; the saved "
                    "index has --dtype float16, asked for float32: not used)"), text
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "p.csv"),
                                  pd.read_csv(tmp_path / "exact.csv"))
    r = mine(st.root, "--hard", "-o", "-", "-q", "--stats", tmp_path / "d.json")
    text = json.loads((tmp_path / "d.json").read_text())["index"]
    assert r.exit_code == 0 and text.startswith("flat(float16) on CPU, loaded from"), text


def test_an_nprobe_above_a_saved_index_cells_is_cut_as_for_one_built_now(tmp_path) -> None:
    """Found by a mine bug hunt (2026-12-07): `mine --nprobe 100` over a saved index of 2
    cells said `ivf(nlist=2, nprobe=100) ... loaded from` (and so did --stats' index),
    where FAISS scans the 2 cells and an index built now says `nprobe=2`."""
    st = random_store(tmp_path / "st", n_sources=40, views=2, dim=8)
    assert runner.invoke(app, ["index", str(st.root), "--index", "ivf", "--nlist", "2",
                               "-q"]).exit_code == 0
    for extra in ([], ["--nlist", "3"]):  # loaded, built now
        r = mine(st.root, "--hard", "--index", "ivf", "--nprobe", "100", *extra, "-o", "-",
                 "-q", "--stats", tmp_path / f"s{len(extra)}.json")
        assert r.exit_code == 0, r.output
        text = json.loads((tmp_path / f"s{len(extra)}.json").read_text())["index"]
        cells = 3 if extra else 2
        assert f"ivf(nlist={cells}, nprobe={cells})" in text, text
        assert ("loaded from" in text) == (not extra), text


def test_an_nlist_above_the_rows_is_said_cut_as_pairkit_index_says_it(tmp_path) -> None:
    """Found by a mine bug hunt (2026-12-07): `mine --index ivf --nlist 500` on 80 rows
    built 80 cells silently (`pairkit index` says `--nlist 500 cut to the 80 rows`), and
    beside a saved index said `the saved index has --nlist 2, asked for 80`."""
    st = random_store(tmp_path / "st", n_sources=40, views=2, dim=8)
    r = mine(st.root, "--hard", "--index", "ivf", "--nlist", "500", "-o", "-", "-q",
             "--stats", tmp_path / "a.json")
    assert r.exit_code == 0, r.output
    text = json.loads((tmp_path / "a.json").read_text())["index"]
    assert "ivf(nlist=80" in text and "--nlist 500 cut to the 80 rows" in text, text


def _broken_stores(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    out = {}
    s = random_store(tmp_path / "nomanifest", n_sources=10)
    (s.root / "manifest.json").unlink()
    out["half-written"] = (s.root, "half-written")
    s = random_store(tmp_path / "checksum", n_sources=10)
    arr = np.load(s.root / "embeddings-00000.npy")
    arr[0, 0] += 1
    np.save(s.root / "embeddings-00000.npy", arr)
    out["checksum"] = (s.root, "checksum mismatch")
    s = random_store(tmp_path / "rows", n_sources=10)
    s.items.iloc[:-1].to_parquet(s.root / s.manifest["items"]["file"])
    out["rows"] = (s.root, "manifest says")
    out["missing"] = (tmp_path / "nothing", "not found")
    return out


@pytest.mark.parametrize("out", ["p.jsonl", "p.parquet", "d/"])
@pytest.mark.parametrize("hard", [True, False])
def test_a_k_at_the_row_count_is_bad_usage_before_the_store_is_read(
        tmp_path: Path, out: str, hard: bool) -> None:
    """Found by a bug hunt (2026-12-07): ``-k`` at or above the store's rows was exit 1
    (a failure), after the store's shards were read and checked (a damaged shard was
    reported instead); it is a bad option value: exit 2, one line, refused before (from
    the manifest's row count)."""
    s = random_store(tmp_path / "st", n_sources=10)  # 20 rows
    arr = np.load(s.root / "embeddings-00000.npy")
    arr[0, 0] += 1  # read and checked: 'checksum mismatch', exit 1
    np.save(s.root / "embeddings-00000.npy", arr)
    for k in ("20", "25"):
        r = mine(s.root, *(["--hard"] if hard else []), "-k", k, "-o", f"{tmp_path}/{out}")
        assert r.exit_code == 2, r.output
        assert r.output.strip().splitlines() == [
            f"error: --num-negatives must be < the store's row count (20), got {k}"]
        assert not (tmp_path / out).exists()


def test_bad_stores(tmp_path: Path) -> None:
    for name, (path, msg) in _broken_stores(tmp_path).items():
        r = mine(path, "--hard", "-o", tmp_path / f"{name}.csv")
        assert r.exit_code == 1, name
        assert msg in last_line(r) and last_line(r).startswith("error: "), (name, r.output)
        assert "Traceback" not in r.output


@pytest.mark.parametrize(
    ("args", "code", "msg"),
    [
        (["-k", "80"], 2, "--num-negatives must be < the store's row count (80), got 80"),
        (["--range-min", "5", "--range-max", "5"], 2,
         "--range-min must be < --range-max, got 5 >= 5"),
        (["--range-min", "2", "--range-max", "12", "-k", "12"], 2,
         "--num-negatives must be <= range-max - range-min, got 12"),
        (["--sampling", "best"], 2, "'best' is not one of 'top', 'random', 'softmax'"),
        (["--relation", "colour"], 2, "--relation must be instance, label or pairs:FILE"),
        (["--index", "lsh"], 2, "'lsh' is not one of 'auto', 'flat'"),
        (["--format", "quad"], 2, "'quad' is not one of 'triplet', 'n-tuple'"),
        (["--device", "cuda"], 1, "(use --device cpu)"),  # no GPU: told before FAISS loads
        (["--device", "gpu"], 2, "--device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
        (["--dtype", "float64"], 2, "'float64' is not one of 'float16', 'float32'"),
        (["--fn-mode", "keep"], 2, "--fn-mode needs --filter-false-negatives"),
        (["--filter-false-negatives", "--fn-rules", "zzz"], 2, "unknown false-negative rule"),
        (["--filter-false-negatives", "--fn-mode", "drop"], 2, "'drop' is not one of"),
        (["--filter-false-negatives", "--fn-cluster-k", "a,b"], 2,
         "--fn-cluster-k must be a comma-separated list of integers"),
        (["--gpu"], 2, "--gpu was replaced: use --device cuda"),
        (["--float16"], 2, "--float16 was replaced: use --dtype float16"),
        (["--keep-flagged"], 2, "--keep-flagged was replaced: use --fn-mode keep"),
        (["--threads", "2"], 2, "--threads is an option of pairkit itself: pairkit --threads N"),
        (["--min-score", "0.9", "--max-score", "0.1"], 2, "--min-score must be <= --max-score"),
    ],
)
def test_bad_options(store, tmp_path: Path, args: list[str], code: int, msg: str) -> None:
    import faiss

    from pairkit.index.backend import torch_cuda_devices

    if args == ["--device", "cuda"] and (faiss.get_num_gpus() > 0 or torch_cuda_devices()):
        pytest.skip("a GPU is visible")  # (torch's: the exact torch search runs there)
    r = mine(store.root, "--hard", *args, "-o", tmp_path / "x.csv")
    assert r.exit_code == code, r.output
    assert msg in r.output and ("Traceback" not in r.output)
    assert last_line(r).startswith("error: " if code == 1 else "Error: ") or msg in last_line(r)
    assert not (tmp_path / "x.csv").exists()


def test_output_defaults_to_stdout(store) -> None:
    """-o defaults to - (JSON Lines on stdout), as in dedup."""
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-q", "-k", "2"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 80 * 2 and set(TRIPLET_COLUMNS) <= set(rows[0])


def test_other_bad_input(store, tmp_path: Path) -> None:
    r = mine(store.root, "--range-min", "1", "-o", tmp_path / "x.csv")
    assert r.exit_code == 2 and "--range-min needs --hard" in last_line(r)
    r = mine(store.root, "--index", "ivf", "-o", tmp_path / "x.csv")
    assert r.exit_code == 2 and "--index needs --hard" in last_line(r)
    r = mine(store.root, "-o", tmp_path / "x.txt")
    assert r.exit_code == 2 and "can't tell the table format" in r.output
    (tmp_path / "exists.csv").write_text("keep")
    r = mine(store.root, "-o", tmp_path / "exists.csv")
    assert r.exit_code == 1 and "pass --force" in last_line(r)
    assert (tmp_path / "exists.csv").read_text() == "keep"
    single = random_store(tmp_path / "single", n_sources=10, views=1)
    r = mine(single.root, "--relation", "instance", "-o", tmp_path / "y.csv")
    assert r.exit_code == 1 and "gives no item a positive" in last_line(r)


def test_index_kinds_float16_and_random_positive(store, tmp_path: Path) -> None:
    ref = tmp_path / "flat.csv"
    assert mine(store.root, "--hard", "--index", "flat", "-o", ref).exit_code == 0
    want = pd.read_csv(ref)
    for extra in (["--index", "ivf", "--nprobe", "64"],
                  ["--index", "flat", "--dtype", "float16"]):
        out = tmp_path / f"{extra[1]}{len(extra)}.csv"
        r = mine(store.root, "--hard", *extra, "-o", out)
        assert r.exit_code == 0, r.output
        got = pd.read_csv(out)
        # every cell scanned / float16 re-scored exactly: the same negatives
        assert (got["negative_id"] == want["negative_id"]).mean() > 0.97
        np.testing.assert_allclose(got["neg_score"], want["neg_score"], atol=1e-5)
    r = mine(store.root, "--hard", "--index", "ivfpq", "-o", tmp_path / "pq.csv")
    assert r.exit_code == 1 and "ivfpq index needs at least 1000 rows" in last_line(r)
    r = mine(store.root, "--hard", "--relation", "label", "--positive", "random",
             "-o", tmp_path / "rp.csv")
    assert r.exit_code == 0
    rp = pd.read_csv(tmp_path / "rp.csv")
    labels = store.items["label"].to_numpy()
    assert (labels[rp["positive_id"]] == labels[rp["anchor_id"]]).all()
    assert mine(store.root, "--hard", "--relation", "label", "-o",
                tmp_path / "wp.csv").exit_code == 0
    weak = pd.read_csv(tmp_path / "wp.csv").groupby("anchor_id")["pos_score"].first()
    rand = rp.groupby("anchor_id")["pos_score"].first()
    assert (rand >= weak - 1e-6).all() and (rand > weak + 1e-6).any()


def test_label_free_filter_reports_its_estimate(tmp_path: Path) -> None:
    """The label-free rules (labels are in the store but unused): the summary names the
    cluster count, the skipped rows and the estimate; --stats has the same figures and
    the exact share of same-label negatives, which the rules bring below naive's."""
    st = random_store(tmp_path / "store", n_sources=120, views=2, dim=16, classes=4, seed=3)
    naive, flt = tmp_path / "n.json", tmp_path / "f.json"
    assert mine(st.root, "--hard", "-o", tmp_path / "n.parquet", "--stats", naive).exit_code == 0
    r = mine(st.root, "--hard", "-o", tmp_path / "f.parquet", "--stats", flt,
             "--filter-false-negatives", "--fn-rules", "near-duplicate,cluster")
    assert r.exit_code == 0, r.output
    assert ("cluster rule: 4 clusters (read off the kNN graph's spectrum), 8 k-means runs"
            in r.output)
    assert "rows sharing a cluster with the anchor were not searched" in r.output
    assert "false-negative estimate (no labels used): the rules flag" in r.output
    s, n = json.loads(flt.read_text()), json.loads(naive.read_text())
    assert s["clusters"]["k"] == [4] and s["clusters"]["auto"]
    assert s["fn_estimate"]["hidden_positive_recall"] > 0.9
    assert s["fn_estimate"]["random_pair_flag_rate"] < 0.5
    assert s["negatives_same_label"] < n["negatives_same_label"]


def test_a_racing_writer_of_the_output_is_not_overwritten(store, tmp_path: Path,
                                                          monkeypatch) -> None:
    """Issue 20.5: two `mine -o out.jsonl` both passed the "exists?" check before mining,
    and the later rename replaced the other's result without a word."""
    from pairkit.core import tables

    out = tmp_path / "out.jsonl"
    real = tables.write_jsonl_stream

    def other_run_finishes_first(df, stream):  # noqa: ANN001 - while this one writes
        out.write_text('{"other": 1}\n')
        return real(df, stream)

    monkeypatch.setattr(tables, "write_jsonl_stream", other_run_finishes_first)
    r = mine(store.root, "--hard", "-k", "2", "-o", out)
    assert r.exit_code == 1, r.output
    assert "was written by another run meanwhile" in last_line(r)
    assert out.read_text() == '{"other": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temp left behind


def test_output_inside_the_input_store_is_refused(store, tmp_path: Path) -> None:
    """Issue 20.6: `mine ref --hard -o ref/manifest.json --force` replaced the store's
    manifest with a pair table."""
    before = {p.name: p.read_bytes() for p in store.root.iterdir() if p.is_file()}
    for args in (["-o", store.root / "manifest.json", "--force"],
                 ["-o", store.root / "pairs.parquet"],
                 ["-o", tmp_path / "p.csv", "--stats", store.root / "manifest.json", "--force"]):
        r = mine(store.root, "--hard", *args)
        assert r.exit_code == 2, r.output
        assert "the input" in last_line(r) and "choose another" in last_line(r)
    assert {p.name: p.read_bytes() for p in store.root.iterdir() if p.is_file()} == before


def test_a_cluster_count_above_the_rows_is_said_capped(store, tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): ``--fn-cluster-k 500`` on a smaller store ran
    with the store's row count and the summary said "(given)"."""
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "--filter-false-negatives",
                            "--fn-cluster-k", "500", "-o", str(tmp_path / "p.parquet")])
    assert r.exit_code == 0, r.output
    assert (f"cluster rule: {store.count} clusters (given 500, at most the store's rows)"
            in r.output)


def test_the_label_rule_alone_on_a_store_without_labels_is_refused(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): ``--fn-rules label`` on a store without labels ran
    and flagged nothing, silently (``issues --checks label-error`` refuses the same)."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(0)
    items = pd.DataFrame({"path": [f"s{i // 2}_{i % 2}.png" for i in range(40)],
                          "source": [f"s{i // 2}" for i in range(40)],
                          "view": [i % 2 for i in range(40)]})
    write_store(tmp_path / "s", rng.normal(size=(40, 8)).astype(np.float32), items,
                encoder={"name": "random"})
    r = mine(tmp_path / "s", "--hard", "--filter-false-negatives", "--fn-rules", "label",
             "-o", tmp_path / "p.parquet")
    assert r.exit_code == 2, r.output
    assert "--fn-rules label: store" in r.output and "has no labels" in r.output
    assert not (tmp_path / "p.parquet").exists()


def test_a_window_past_every_candidate_is_refused(tmp_path) -> None:
    """Found by a mine bug hunt (2026-12-06): ``--range-min`` at or above the store's rows
    wrote an empty table, exit 0, an empty histogram line in the summary. It doesn't fit
    the store: bad usage, exit 2, as ``-k`` at the row count (it was exit 1 until
    2026-12-07), one line, nothing written."""
    from tests.conftest import random_store

    st = random_store(tmp_path / "st", n_sources=20, views=2)  # 40 rows: ranks 0..37
    out = tmp_path / "p.jsonl"
    for first in ("39", "1000"):
        r = runner.invoke(app, ["mine", str(st.root), "--hard", "-k", "2", "--range-min",
                                first, "--range-max", "2000", "-o", str(out)])
        assert r.exit_code == 2, r.output
        assert r.output == (f"error: --range-min must be <= 38, the last rank a candidate "
                            f"can have (the store has 40 rows), got {first}\n")
        assert not out.exists()
    # 38 passes this check (an anchor's other view is no candidate either): the run gives
    # no anchor a negative, exit 1 (test_a_run_in_which_no_anchor_got_a_negative_...)
    r = runner.invoke(app, ["mine", str(st.root), "--hard", "-k", "1", "--range-min", "38",
                            "-o", str(out), "-q"])
    assert r.exit_code == 1 and "no negative for any of the 40 anchors" in r.output
    assert not out.exists()
    r = runner.invoke(app, ["mine", str(st.root), "--hard", "-k", "1", "--range-min", "37",
                            "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("out", ["p.parquet", "p.jsonl", "-"])
def test_a_run_in_which_no_anchor_got_a_negative_fails_and_writes_nothing(
        store, tmp_path: Path, out: str) -> None:
    """Found by a bug hunt (2026-12-08): the check before the work knows only that an
    anchor has at most N - 1 candidates; on 80 rows of two views, its other view is no
    candidate either (ranks 0..77), and under --relation label its 20 label-mates are none
    (ranks 0..59). ``--range-min 78`` (label: 60) passed the check, then wrote an empty
    table, exit 0. As a relation with no positive: exit 1, one line, nothing written
    (streamed parts, the table in memory, stdout); one rank lower mines every anchor."""
    target = out if out == "-" else tmp_path / out
    for relation, first in (("instance", 78), ("label", 60)):
        args = ["--hard", "-k", "1", "--relation", relation, "-o", target,
                "--stats", tmp_path / "s.json"]
        r = mine(store.root, *args, "--range-min", first)
        assert r.exit_code == 1, r.output
        assert r.stderr == (f"error: no negative for any of the 80 anchors with --range-min "
                            f"{first} (an anchor's own source and its positives are never its "
                            "candidates): nothing written\n")
        assert r.stdout == "" and not (tmp_path / "s.json").exists()
        assert out == "-" or not any(tmp_path.iterdir())
        r = mine(store.root, *args, "--range-min", first - 1, "-q")
        assert r.exit_code == 0, r.output
        s = json.loads((tmp_path / "s.json").read_text())
        assert (s["rows"], s["negatives"], s["rank_histogram"]["50-99"]) == (80, 80, 80)
        if out == "p.jsonl":  # each anchor's last candidate, at the window's first rank
            assert set(pd.read_json(target, lines=True)["neg_rank"]) == {first - 1}
        for p in tmp_path.iterdir():
            p.unlink()


def test_api_refuses_what_the_command_refuses(tmp_path) -> None:
    """Found by a mine bug hunt (2026-12-06): ``mine_pairs(fn_mode="keep")`` without the
    filter did nothing (the command refuses it), as did ``sampling_temperature`` without
    softmax sampling."""
    import pytest

    from pairkit.api import mine_pairs
    from pairkit.errors import UsageError
    from tests.conftest import random_store

    st = random_store(tmp_path / "st", n_sources=10, views=2)
    with pytest.raises(UsageError, match="fn_mode='keep' needs filter_false_negatives=True"):
        mine_pairs(st.root, fn_mode="keep")
    with pytest.raises(UsageError, match="sampling_temperature applies to sampling='softmax'"):
        mine_pairs(st.root, sampling_temperature=0.2)
    assert len(mine_pairs(st.root, sampling="softmax", sampling_temperature=0.2))


def test_seeds_two_to_the_32_apart_draw_differently(tmp_path) -> None:
    """Found by a mine bug hunt (2026-12-06): the hash of every random choice took the
    seed's low 32 bits, so a sweep of 2**32 + i repeated i's tables."""
    from pairkit.api import mine_pairs

    st = random_store(tmp_path / "st", n_sources=30, views=2)
    a, b, c = (mine_pairs(st.root, sampling="random", seed=s)["negative_id"].tolist()
               for s in (0, 2**32, 0))
    assert a == c and a != b


def test_a_store_without_random_pairs_of_two_sources_mines_and_says_so(tmp_path) -> None:
    """Found by a conventions hunt (2026-12-06): on one source of two views (or two
    sources whose random sample drew no pair of both), the label-free estimate had no
    random pair; the summary formatted None: the table written, then exit 1 with an
    internal error (with -q too). Two sources, four views of one and one of the other,
    whose sample at --seed 38 drew no pair of both: the summary says so. (One source alone
    gives no anchor a negative: since 2026-12-08 an error before any summary.)"""
    layout = ["a", "a", "a", "a", "b"]
    np.save(tmp_path / "v.npy", np.random.default_rng(1).normal(size=(5, 8)).astype("f4"))
    pd.DataFrame({"path": [f"{s}.png" for s in layout], "source": layout,
                  "view": [0, 1, 2, 3, 0]}).to_csv(tmp_path / "i.csv", index=False)
    r = runner.invoke(app, ["import", str(tmp_path / "v.npy"), "--items", str(tmp_path / "i.csv"),
                            "-o", str(tmp_path / "st"), "-q"])
    assert r.exit_code == 0, r.output
    for quiet in ([], ["-q"]):
        out = tmp_path / f"p{len(quiet)}.parquet"
        r = runner.invoke(app, ["mine", str(tmp_path / "st"), "--hard", "-k", "1", "--seed",
                                "38", "--filter-false-negatives", "-o", str(out), *quiet])
        assert r.exit_code == 0, r.output
        assert out.exists()
        assert (r.output == "") if quiet else ("no random pair of two sources to sample"
                                               in r.output), r.output


def test_outputs_whose_kind_the_name_contradicts_are_refused(store, tmp_path: Path) -> None:
    """Found by a bug hunt (hunt-s 10): an existing empty folder out.csv got parquet parts
    written into it (rc 0, no word), and --stats statsdir/ wrote a file named statsdir."""
    folder = tmp_path / "out.csv"
    folder.mkdir()
    for command in (["mine", str(store.root), "--hard"], ["issues", str(store.root)],
                    ["dedup", str(store.root)]):
        r = runner.invoke(app, [*command, "-o", str(folder)])
        assert r.exit_code == 2, (command, r.output)
        assert r.stderr.strip() == (
            f"error: -o {folder} is a folder, but a .csv table is one file: remove the "
            "folder, or end the name with / for parquet parts in it"), (command, r.stderr)
    assert list(folder.iterdir()) == []
    r = mine(store.root, "--hard", "-o", tmp_path / "m.csv", "--stats", f"{tmp_path}/sd/")
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == (f"error: --stats {tmp_path}/sd/ ends in /, but the stats "
                                "are one JSON file (stats.json)"), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
    # a folder named .parquet is a parquet dataset (Spark's habit), and DIR/ says so
    r = mine(store.root, "--hard", "-o", f"{folder}/", "-q")
    assert r.exit_code == 0, r.output
    assert [p.name for p in folder.iterdir()] == ["part-00000.parquet"]
