"""Every command keeps its outputs out of its inputs, and a folder output is never ``-``.

Found by a CLI bug hunt (2026-12-06): mine, dedup, train and project refused ``-o`` inside
their input store, while search, issues (and its --knn-graph), eval --plot and report
(with the store it finds beside a table) wrote into it; and ``-o -`` made a folder
literally named ``-`` for import, train, project, report and eval --plot.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.conftest import random_store
from tests.proc import error_lines

runner = CliRunner()


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("apart")
    st = random_store(root / "st", n_sources=30, views=2, dim=8).root
    pairs = root / "p.parquet"
    r = runner.invoke(app, ["mine", str(st), "--hard", "-o", str(pairs), "-q"])
    assert r.exit_code == 0, r.output
    head = root / "head"
    r = runner.invoke(app, ["train", str(st), "--pairs", str(pairs), "-o", str(head), "-q",
                            "--epochs", "1"])
    assert r.exit_code == 0, r.output
    np.save(root / "emb.npy", np.eye(3, dtype=np.float32) + 0.1)
    pd.DataFrame({"path": ["a.png", "b.png", "c.png"]}).to_csv(root / "items.csv",
                                                               index=False)
    return {"root": root, "st": st, "pairs": pairs, "head": head}


def cases(m: dict[str, Path]) -> list[tuple[list[str], str]]:
    st, head, root = str(m["st"]), str(m["head"]), m["root"]
    return [
        (["search", st, "0", "-o", f"{st}/hits.csv"], f"is inside the input {st}"),
        (["issues", st, "-o", f"{st}/issues.csv"], f"is inside the input {st}"),
        (["issues", st, "-o", str(root / "i.csv"), "--knn-graph", f"{st}/g.npz"],
         f"--knn-graph {st}/g.npz is inside the input {st}"),
        (["eval", st, "--metrics", "knn", "--plot", st], f"--plot {st} is the input {st}"),
        (["eval", st, "--metrics", "knn", "--head", head, "--plot", head],
         f"--plot {head} is the input {head}"),
        (["report", str(m["pairs"]), "-o", f"{st}/rr"], f"is inside the input {st}"),
        (["import", str(root / "emb.npy"), "--items", str(root / "items.csv"), "-o", "-"],
         "-o -: a store is a folder"),
        (["train", st, "--pairs", str(m["pairs"]), "-o", "-"], "-o -: a head is a folder"),
        (["project", st, "--head", head, "-o", "-"], "-o -: a store is a folder"),
        (["report", str(m["pairs"]), "-o", "-"], "-o -: a report is a folder"),
        (["eval", st, "--metrics", "knn", "--plot", "-"], "--plot -: the plots are a folder"),
        (["embed", str(root), "-o", "-", "--model", "pixels"], "-o -: a store is a folder"),
    ]


def test_outputs_inside_inputs_and_folder_outputs_on_stdout_are_refused(made, tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a folder named "-" would appear
    before = {k: snapshot(made[k]) for k in ("st", "head")}
    for args, message in cases(made):
        r = runner.invoke(app, args)
        lines = error_lines(r.stderr)
        assert r.exit_code == 2, (args, r.output)
        assert len(lines) == 1 and message in lines[0], (args, lines)
    assert {k: snapshot(made[k]) for k in ("st", "head")} == before
    assert list(tmp_path.iterdir()) == []


def test_mine_outputs_by_other_spellings_a_file_parent_and_the_relation_file(made, tmp_path,
                                                                            monkeypatch):
    """Found by a mine bug hunt (2026-12-06): ``--stats`` naming ``-o``'s file by another
    spelling replaced the mined table with the stats under --force (exit 0); a path under
    a file failed as an internal error after the whole run, the table left written;
    ``--relation pairs:FILE -o FILE --force`` replaced the input table; ``--stats -``
    wrote a file named ``-``."""
    monkeypatch.chdir(tmp_path)
    st = str(made["st"])
    rel = tmp_path / "rel.csv"
    rel.write_text("anchor,positive\nc0/s0.jpg,c0/s4.jpg\n")
    rel_bytes = rel.read_bytes()
    (tmp_path / "f").write_text("a file")
    refused = [
        (["mine", st, "--hard", "-o", "p.jsonl", "--stats", str(tmp_path / "p.jsonl"),
          "--force"], "--stats and -o must be different files"),
        (["mine", st, "--hard", "-o", "p.jsonl", "--stats", "f/s.json"],
         "--stats f/s.json: f is a file, not a folder"),
        (["mine", st, "--hard", "-o", "f/x.jsonl"], "-o f/x.jsonl: f is a file, not a folder"),
        (["search", st, "0", "-o", "f/x.jsonl"], "-o f/x.jsonl: f is a file, not a folder"),
        (["mine", st, "--hard", "--relation", f"pairs:{rel}", "-o", str(rel), "--force"],
         f"-o {rel} is the input {rel}"),
        (["mine", st, "--hard", "--relation", f"pairs:{rel}", "-o", "p.jsonl", "--stats",
          str(rel), "--force"], f"--stats {rel} is the input {rel}"),
    ]
    for args, message in refused:
        r = runner.invoke(app, args)
        lines = error_lines(r.stderr)
        assert r.exit_code == 2, (args, r.output)
        assert len(lines) == 1 and message in lines[0], (args, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "rel.csv"]
    assert rel.read_bytes() == rel_bytes
    # --stats -: the stats on stdout (the table in its file)
    r = runner.invoke(app, ["mine", st, "--hard", "-o", "p.jsonl", "--stats", "-", "-q"])
    assert r.exit_code == 0, r.output
    import json

    assert json.loads(r.stdout)["anchors"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "p.jsonl", "rel.csv"]


def test_an_output_that_is_a_link_to_nothing_is_refused_before_the_work(made, tmp_path):
    """Found by a bug hunt (2026-12-06): mine, search and dedup did the whole run and then
    said another run had written the output; report and eval --plot ended in an internal
    error; import and train said "File exists"."""
    st, head, root = str(made["st"]), str(made["head"]), made["root"]
    table, folder = tmp_path / "out.csv", tmp_path / "out"
    table.symlink_to(tmp_path / "missing.csv")
    folder.symlink_to(tmp_path / "missing")
    for args in (["mine", st, "--hard", "-o"], ["search", st, "0", "-o"],
                 ["dedup", st, "--method", "threshold", "-o"], ["issues", st, "-o"],
                 ["report", str(made["pairs"]), "-o"],
                 ["eval", st, "--metrics", "knn", "--plot"],
                 ["import", str(root / "emb.npy"), "--items", str(root / "items.csv"), "-o"],
                 ["train", st, "--pairs", str(made["pairs"]), "--epochs", "1", "-o"],
                 ["project", st, "--head", head, "-o"],
                 ["embed", str(root), "--model", "pixels", "-o"]):
        link = table if args[0] in ("mine", "search", "dedup", "issues") else folder
        r = runner.invoke(app, [*args, str(link)])
        lines = error_lines(r.stderr)
        assert r.exit_code == 2, (args, r.output)
        assert len(lines) == 1 and "is a link to" in lines[0] and "does not exist" in lines[0], \
            (args, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.csv"]


def test_mine_stats_inside_the_table_or_the_table_inside_the_stats_is_refused(made, tmp_path,
                                                                             monkeypatch):
    """Found by a mine bug hunt (2026-12-07): ``-o p.csv --stats p.csv/s.json`` and
    ``-o s.json/p.csv --stats s.json`` mined the whole table, wrote it and then failed
    (exit 1, 'a file is on the way' / 'written by another run meanwhile'); ``-o d/ --stats
    d/s.json`` put the stats into the table's dataset folder, whose ``--force`` rerun was
    then refused ('a folder that holds other files')."""
    monkeypatch.chdir(tmp_path)
    st = str(made["st"])
    for out, stats in (("p.csv", "p.csv/s.json"), ("s.json/p.csv", "s.json"),
                       ("d/", "d/s.json"), ("d/", "./d/sub/s.json")):
        r = runner.invoke(app, ["mine", st, "--hard", "-o", out, "--stats", stats, "-q"])
        lines = error_lines(r.stderr)
        assert r.exit_code == 2, (out, stats, r.output)
        assert len(lines) == 1 and "--stats and -o must be apart" in lines[0], lines
        assert list(tmp_path.iterdir()) == [], (out, stats)
