"""pairkit report end to end (no browser): folder layout, data, stores, errors."""

from __future__ import annotations

import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.report.page import DATA_ID
from tests.report.kit import (
    BROKEN,
    HOSTILE_LABELS,
    HOSTILE_NAMES,
    HOSTILE_REASON,
    HOSTILE_TITLE,
    hostile_kit,
    image_store,
)

runner = CliRunner()


def report(*args: object):  # noqa: ANN201
    return runner.invoke(app, ["report", *map(str, args)])


class _Scripts(HTMLParser):
    """The page's <script> blocks and the CSP, as an HTML parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.csp: str | None = None
        self.title = ""
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        a = dict(attrs)
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp = a["content"]
        if tag in ("script", "title"):
            self._in = tag
            if tag == "script":
                self.scripts.append((a, ""))

    def handle_endtag(self, tag):  # noqa: ANN001
        self._in = None

    def handle_data(self, data):  # noqa: ANN001
        if self._in == "script":
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        elif self._in == "title":
            self.title += data


def page_data(index: Path) -> tuple[dict, _Scripts]:
    parser = _Scripts()
    parser.convert_charrefs = True
    parser.feed(index.read_text(encoding="utf-8"))
    blocks = [text for attrs, text in parser.scripts if attrs.get("id") == DATA_ID]
    assert len(blocks) == 1
    return json.loads(blocks[0]), parser


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_report_of_a_whole_pipeline(pipeline, tmp_path):
    before = digest(pipeline.root)
    out = tmp_path / "rep"
    r = report(pipeline.pairs, pipeline.duplicates, pipeline.eval_json, pipeline.plots,
               "-o", out, "--sample", "10")
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == f"open {out / 'index.html'}"
    assert digest(pipeline.root) == before  # inputs never modified
    data, parser = page_data(out / "index.html")
    pairs, dedup, ev = data["sections"]
    assert pairs["kind"] == "pairs" and dedup["kind"] == "dedup" and ev["kind"] == "eval"
    table = pd.read_parquet(pipeline.pairs)
    s = pairs["summary"]
    assert s["rows"] == len(table) and s["anchors"] == table["anchor_id"].nunique()
    assert s["flagged"] == int(table["false_negative"].sum())
    assert s["anchors_shown"] == len(pairs["anchors"]) == 10
    # the store was found next to the table: labels and thumbnails for every item shown
    assert Path(pairs["store"]) == pipeline.store.resolve()
    items = data["items"]
    assert all(it["label"] in ("class0", "class1", "class2", "class3") for it in items)
    assert all(it["thumb"] and (out / it["thumb"]).is_file() for it in items)
    assert len({it["thumb"] for it in items}) == len(list((out / "t").iterdir()))
    store_items = Store.open(pipeline.store).items
    for block in pairs["anchors"]:
        anchor = items[block["a"]]
        rows = table[table["anchor_id"] == anchor["id"]]
        negatives = rows.loc[rows["negative_id"] >= 0, "negative_id"]  # mined positives: -1
        assert [items[n[0]]["id"] for n in block["n"]] == negatives.tolist()
        assert anchor["path"] == store_items["path"][anchor["id"]]
    assert dedup["summary"]["groups"] == pd.read_csv(pipeline.duplicates)["group"].nunique()
    metrics = json.loads(pipeline.eval_json.read_text())
    assert ev["columns"] == ["result"]
    assert ["queries", str(metrics["n_queries"])] in ev["rows"]
    assert ["MAP@R", f"{metrics['map_at_r']:.4f}"] in ev["rows"]
    assert sorted(p["name"] for p in ev["plots"]) == ["map.png", "scores.png"]
    for p in ev["plots"]:
        assert (out / p["file"]).read_bytes() == (pipeline.plots / p["name"]).read_bytes()
    # no network: a CSP with nothing but the page's own script/style and local images
    assert parser.csp is not None and "default-src 'none'" in parser.csp
    assert "http" not in parser.csp and "unsafe" not in parser.csp
    assert not re.search(r"(src|href)=\"?(https?:)?//", (out / "index.html").read_text())


@pytest.mark.parametrize("which", ["ntuple", "labeled", "plain"])
def test_every_pair_format(pipeline, tmp_path, which):
    src = getattr(pipeline, which)
    r = report(src, "-o", tmp_path / "rep", "--sample", "0")
    assert r.exit_code == 0, r.output
    data, _ = page_data(tmp_path / "rep" / "index.html")
    (sec,) = data["sections"]
    assert sec["summary"]["anchors_shown"] == sec["summary"]["anchors"] == len(sec["anchors"])
    if which == "plain":
        assert not sec["summary"]["has_flags"]
        assert sec["summary"]["negatives"] == len(pd.read_parquet(src))
    else:
        assert sec["summary"]["has_flags"] and sec["summary"]["flagged"] > 0


def test_sample_is_seeded(pipeline, tmp_path):
    def anchors(seed: int, name: str) -> list[int]:
        r = report(pipeline.pairs, "-o", tmp_path / name, "--sample", "5", "--seed", seed)
        assert r.exit_code == 0, r.output
        data, _ = page_data(tmp_path / name / "index.html")
        return [data["items"][b["a"]]["id"] for b in data["sections"][0]["anchors"]]

    assert anchors(1, "a") == anchors(1, "b") != anchors(2, "c")


def test_hostile_names_stay_text_in_the_page(tmp_path):
    store, pairs, dedup, images, paths = hostile_kit(tmp_path)
    out = tmp_path / "rep"
    r = report(pairs, dedup, "-o", out, "--title", HOSTILE_TITLE)
    assert r.exit_code == 0, r.output
    html = (out / "index.html").read_text(encoding="utf-8")
    data, parser = page_data(out / "index.html")
    # exactly the page's own two scripts: nothing in the data opened a third
    assert [a.get("type") for a, _ in parser.scripts] == ["application/json", None]
    assert parser.title == HOSTILE_TITLE
    block = html.split(f'id="{DATA_ID}">', 1)[1].split("</script>", 1)[0]
    assert "<" not in block and ">" not in block and "&" not in block
    assert {it["path"] for it in data["items"]} == set(paths)
    assert {it["label"] for it in data["items"]} == set(HOSTILE_LABELS)
    reasons = {n[4] for b in data["sections"][0]["anchors"] for n in b["n"] if n[3]}
    assert reasons == {HOSTILE_REASON}
    assert data["sections"][0]["summary"]["reasons"] == {
        "<svg onload=window.__pwned=4>": len(paths), "kreciprocal": len(paths),
        "label": len(paths)}
    by_path = {it["path"]: it for it in data["items"]}
    for name in HOSTILE_NAMES:
        assert by_path[name]["thumb"] and (out / by_path[name]["thumb"]).is_file()
    for name, reason in BROKEN.items():
        assert by_path[name]["thumb"] is None and reason in by_path[name]["why"], name
    # thumbnail file names never carry a name from the data
    assert all(re.fullmatch(r"[0-9a-f]{24}\.jpg", f.name) for f in (out / "t").iterdir())
    assert not (out / "t" / "outside.png").exists()


def test_import_store_without_images_says_so(tmp_path):
    store = image_store(tmp_path / "store", [f"x/{i}.png" for i in range(6)],
                        ["a", "b"] * 3)
    t = pd.DataFrame({"store_id": store.content_id, "anchor_id": [0, 1], "positive_id": [1, 2],
                      "negative_id": [3, 4], "anchor_path": ["x/0.png", "x/1.png"],
                      "positive_path": ["x/1.png", "x/2.png"],
                      "negative_path": ["x/3.png", "x/4.png"]})
    t.to_csv(tmp_path / "pairs.csv", index=False)
    r = report(tmp_path / "pairs.csv", "-o", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    assert "has no image folder (made by import?)" in r.output
    data, _ = page_data(tmp_path / "rep" / "index.html")
    assert any("no image folder" in n for n in data["notes"])
    assert [it["label"] for it in data["items"]][:2] == ["a", "b"]
    assert all(it["thumb"] is None for it in data["items"])
    assert not (tmp_path / "rep" / "t").exists() or not any((tmp_path / "rep" / "t").iterdir())


def test_without_a_store_paths_from_the_table(tmp_path):
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [1], "negative_id": [2],
                      "anchor_path": ["a.png"], "positive_path": ["b.png"],
                      "negative_path": ["c.png"]})
    (tmp_path / "t").mkdir()
    t.to_json(tmp_path / "t" / "p.jsonl", orient="records", lines=True)
    r = report(tmp_path / "t" / "p.jsonl", "-o", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    assert "no store found" in r.output
    data, _ = page_data(tmp_path / "rep" / "index.html")
    assert [it["path"] for it in data["items"]] == ["a.png", "b.png", "c.png"]


def test_a_damaged_store_nearby_is_skipped(tmp_path):
    """Issue 20.14: without --store, report aborted on an unrelated damaged store in a
    nearby folder while it looked for the table's store."""
    import numpy as np

    from pairkit.core.store import Store
    from pairkit.core.store_writer import write_store

    write_store(tmp_path / "broken", np.eye(3, dtype=np.float32),
                pd.DataFrame({"path": ["x.png", "y.png", "z.png"]}), dtype="float32")
    items = Store.open(tmp_path / "broken").manifest["items"]["file"]
    (tmp_path / "broken" / items).write_bytes(b"PAR1 damaged")
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [1], "negative_id": [2],
                      "anchor_path": ["a.png"], "positive_path": ["b.png"],
                      "negative_path": ["c.png"]})
    t.to_json(tmp_path / "p.jsonl", orient="records", lines=True)
    r = report(tmp_path / "p.jsonl", "-o", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    assert "no store found" in r.output


def test_ids_train_refuses_are_refused_here_too(tmp_path):
    """Issue 20.11: report showed tables whose ids were 1.5 or empty (truncated, or read as
    "none"), which train refuses."""
    (tmp_path / "t").mkdir()
    for column, values, shown in [("anchor_id", [0.0, 1.5], "1.5"),
                                  ("anchor_id", [0, None], "nan"),
                                  ("negative_id", [2, "oops"], "'oops'")]:
        t = pd.DataFrame({"anchor_id": [0, 1], "positive_id": [1, 0], "negative_id": [2, 2],
                          "anchor_path": ["a.png", "b.png"], "positive_path": ["b.png", "a.png"],
                          "negative_path": ["c.png", "c.png"]})
        t[column] = pd.Series(values, dtype=object)
        t.to_json(tmp_path / "t" / "p.jsonl", orient="records", lines=True)
        r = report(tmp_path / "t" / "p.jsonl", "-o", tmp_path / "rep")
        assert r.exit_code == 1, r.output
        assert f"column {column} must hold integer ids, got {shown} (row 1)" in r.output
        assert not (tmp_path / "rep").exists()


def test_a_table_from_another_store_is_refused_with_store(pipeline, tmp_path):
    other = image_store(tmp_path / "other", ["a.png", "b.png"], [None, None])
    r = report(pipeline.pairs, "-o", tmp_path / "rep", "--store", other.root)
    assert r.exit_code == 1
    assert "does not belong to store" in r.output and "another store" in r.output
    assert not (tmp_path / "rep").exists()
    # dedup groups carry no store_id: their ids and paths are checked
    g = pd.DataFrame({"group": [0, 0], "id": [0, 1], "path": ["b.png", "a.png"],
                      "keep": [True, False], "similarity": [1.0, 0.99]})
    g.to_csv(tmp_path / "g.csv", index=False)
    r = report(tmp_path / "g.csv", "-o", tmp_path / "rep", "--store", other.root)
    assert r.exit_code == 1 and "the table says 'b.png'" in r.output
    g["id"] = [5, 6]
    g.to_csv(tmp_path / "g.csv", index=False)
    r = report(tmp_path / "g.csv", "-o", tmp_path / "rep", "--store", other.root)
    assert r.exit_code == 1 and "is not a row of store" in r.output


def test_an_anchor_or_dedup_id_of_minus_one_is_no_store_row(tmp_path):
    """Found by a bug hunt (2026-12-07): -1 (no negative) was taken as an id anywhere, so
    with the store an anchor_id -1 or a dedup id -1 showed the store's last row (its path,
    label and thumbnail) as that item; train refuses such a table."""
    import shutil

    store = image_store(tmp_path / "store", ["a.png", "b.png", "c.png"], ["x", "y", "z"])
    t = pd.DataFrame({"store_id": store.content_id, "anchor_id": [0, -1],
                      "positive_id": [1, 0], "negative_id": [2, 1]})
    t.to_csv(tmp_path / "p.csv", index=False)
    g = pd.DataFrame({"group": [0, 0], "id": [0, -1], "keep": [True, False],
                      "similarity": [1.0, 0.99]})
    g.to_csv(tmp_path / "g.csv", index=False)
    for table, column in ((tmp_path / "p.csv", "anchor_id"), (tmp_path / "g.csv", "id")):
        r = report(table, "-o", tmp_path / "rep", "--store", store.root)
        assert r.exit_code == 1, r.output
        assert f"does not belong to store {store.root}: {column} holds negative ids" in r.output
        assert not (tmp_path / "rep").exists()
        r = report(table, "-o", tmp_path / "rep")  # nor is the store found beside it taken
        assert r.exit_code == 0 and "no store found" in r.output, r.output
        data, _ = page_data(tmp_path / "rep" / "index.html")
        assert {it["id"]: it["label"] for it in data["items"]}[-1] is None
        shutil.rmtree(tmp_path / "rep")
    # a search table's id -1 is a padding row (no hit), as before
    s = pd.DataFrame({"store_id": store.content_id, "query": ["id:0", "id:0"],
                      "query_kind": "item", "rank": [0, 1], "id": [1, -1],
                      "score": [0.5, None]})
    s.to_csv(tmp_path / "s.csv", index=False)
    assert report(tmp_path / "s.csv", "-o", tmp_path / "rep", "--store", store.root
                  ).exit_code == 0


def test_output_folder_rules(pipeline, tmp_path):
    out = tmp_path / "rep"
    assert report(pipeline.eval_json, "-o", out).exit_code == 0
    first = (out / "index.html").read_text()
    r = report(pipeline.eval_json, "-o", out)
    assert r.exit_code == 1 and "exists; pass --force" in r.output
    assert report(pipeline.eval_json, "-o", out, "--force", "--title", "again").exit_code == 0
    assert (out / "index.html").read_text() != first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    r = report(pipeline.eval_json, "-o", mine, "--force")
    assert r.exit_code == 1 and "not a pairkit report folder" in r.output
    assert (mine / "notes.txt").read_text() == "keep me"
    r = report(pipeline.eval_json, "-o", pipeline.root, "--force")
    assert r.exit_code == 2 and "inside the output folder" in r.output
    # issue 20.13: -o the store itself said the input was "inside" the output
    r = report(pipeline.pairs, "-o", pipeline.store, "--store", pipeline.store, "--force")
    assert r.exit_code == 2 and f"-o {pipeline.store} is the input {pipeline.store}" in r.output
    r = report(pipeline.pairs, "-o", pipeline.store / "rep", "--store", pipeline.store)
    assert r.exit_code == 2 and "is inside the input" in r.output


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--sample", "-1"], 2, "--sample must be >= 0"),
    (["--thumb-size", "4"], 2, "--thumb-size must be in 16..512"),
])
def test_bad_options(pipeline, tmp_path, args, code, message):
    r = report(pipeline.pairs, "-o", tmp_path / "rep", *args)
    assert r.exit_code == code and message in r.output
    assert "Traceback" not in r.output and not (tmp_path / "rep").exists()


def test_bad_inputs_are_one_line(tmp_path, small_store):
    (tmp_path / "items.csv").write_text("path,label\na.png,x\n")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    for bad, message in [
        (tmp_path / "nope.csv", "input"),
        (tmp_path / "items.csv", "neither a pair table nor dedup groups"),
        (tmp_path / "broken.parquet", "can't read table"),
        (small_store.root, "is a store"),
    ]:
        r = report(bad, "-o", tmp_path / "rep")
        assert r.exit_code == 1, r.output
        assert r.output.startswith("error: ") and message in r.output
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_table_from_stdin(pipeline, tmp_path):
    text = pd.read_parquet(pipeline.pairs).head(12).to_json(orient="records", lines=True)
    r = runner.invoke(app, ["report", "-", "-o", str(tmp_path / "rep"), "--store",
                            str(pipeline.store)], input=text)
    assert r.exit_code == 0, r.output
    data, _ = page_data(tmp_path / "rep" / "index.html")
    assert data["sections"][0]["summary"]["rows"] == 12
    assert np.all([it["thumb"] for it in data["items"]])


def test_eval_json_from_stdin(pipeline, tmp_path):
    """``pairkit eval --json | pairkit report -``: found by the pipes-and-Ray hunt
    (2026-12-07), refused as 'stdin is neither a pair table nor dedup groups ... (columns:
    n_queries, ...)' though the same JSON in a file is an eval tab; so was ``--compare``'s
    and a pretty-printed one (``| jq .``)."""
    metrics = json.loads(pipeline.eval_json.read_text())
    r = report(pipeline.eval_json, "-o", tmp_path / "from-file")  # the file's count
    count = r.stderr.splitlines()[0].split(": ")[1]
    assert count.endswith(" metrics")
    for text, columns in ((pipeline.eval_json.read_text(), ["result"]),
                          (json.dumps({"raw": metrics, "head": metrics}), ["raw", "head"]),
                          (json.dumps(metrics, indent=2) + "\n", ["result"])):
        out = tmp_path / f"rep{len(text)}"
        r = runner.invoke(app, ["report", "-", "-o", str(out)], input=text)
        assert r.exit_code == 0, r.output
        assert r.stderr.startswith(f"-: {count}\n")
        data, _ = page_data(out / "index.html")
        (ev,) = data["sections"]
        assert ev["kind"] == "eval"
        assert ev["columns"] == columns
        assert ["MAP@R", *[f"{metrics['map_at_r']:.4f}"] * len(ev["columns"])] in ev["rows"]


def _run_as_nobody(args: list[str], cwd: Path):  # noqa: ANN202
    """``pairkit ARGS`` as an unprivileged user (root reads any folder, so a folder
    another user keeps closed can only be met without root): in-process when this test
    is not root, else in a child under setpriv as uid/gid 65534. Returns (exit code,
    output: stdout and stderr together), or None when neither works."""
    import os
    import shutil
    import subprocess
    import sys

    from tests.proc import child_env

    if os.geteuid() != 0:
        r = report(*args[1:])
        return r.exit_code, r.output
    if shutil.which("setpriv") is None:
        return None
    env = child_env()
    env["HOME"] = str(cwd)
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
         "pairkit", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if "No module named" in proc.stderr or "Permission denied: '/" in proc.stderr and \
            str(cwd) not in proc.stderr:
        return None  # the interpreter or checkout is closed to that user
    return proc.returncode, proc.stdout + proc.stderr


def test_a_closed_store_folder_nearby_is_skipped():
    """Issue 20.14, reproduced: without --store, a nearby store folder this user may not
    read (another user's, mode 000) ended report with 'internal error: PermissionError'
    (exit 1) while it looked for the table's store. Damaged manifests, item tables and
    shards next to the table were already skipped (tests/benchmarks/report_nearby.py)."""
    import os
    import shutil
    import tempfile

    from pairkit.core.store_writer import write_store

    base = Path(tempfile.mkdtemp(prefix="pairkit-closed-"))  # not under pytest's 0700 root
    try:
        write_store(base / "store", np.eye(3, dtype=np.float32),
                    pd.DataFrame({"path": ["x.png", "y.png", "z.png"]}), dtype="float32")
        write_store(base / "closed", np.eye(3, dtype=np.float32)[::-1].copy(),
                    pd.DataFrame({"path": ["q.png", "r.png", "s.png"]}), dtype="float32")
        store = Store.open(base / "store")
        (base / "work").mkdir()
        t = pd.DataFrame({"store_id": [store.content_id], "anchor_id": [0], "positive_id": [1],
                          "negative_id": [2], "anchor_path": ["x.png"],
                          "positive_path": ["y.png"], "negative_path": ["z.png"]})
        t.to_json(base / "work" / "p.jsonl", orient="records", lines=True)
        if os.geteuid() == 0:
            os.chown(base, 65534, 65534)
            for p in base.rglob("*"):
                os.chown(p, 65534, 65534)
            os.chown(base / "closed", 0, 0)  # someone else's, closed to the user
        base.chmod(0o755)
        (base / "closed").chmod(0)
        r = _run_as_nobody(["report", "work/p.jsonl", "-o", "rep"], base)
        if r is None:
            pytest.skip("no way to run as an unprivileged user here")
        code, out = r
        assert code == 0, out
        assert "internal error" not in out and "no store found" not in out
        data, _ = page_data(base / "rep" / "index.html")
        assert data["sections"][0]["store"] == str(base / "store")
    finally:
        (base / "closed").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_an_image_folder_in_a_symlink_loop_costs_the_thumbnails(tmp_path):
    """A store whose image folder became a symlink loop: no thumbnails and a note, not
    'internal error: RuntimeError: Symlink loop'."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    store = image_store(tmp_path / "store", ["a.png"], [None], image_root=tmp_path / "loop")
    t = pd.DataFrame({"store_id": [store.content_id], "anchor_id": [0], "positive_id": [0],
                      "negative_id": [0]})
    t.to_json(tmp_path / "p.jsonl", orient="records", lines=True)
    r = report(tmp_path / "p.jsonl", "--store", store.root, "-o", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    assert "internal error" not in r.output
    assert f"image folder {tmp_path / 'loop'} of store" in r.output


def test_an_input_in_a_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "p.jsonl").symlink_to(tmp_path / "p.jsonl")
    r = report(tmp_path / "p.jsonl", "-o", tmp_path / "rep")
    assert r.exit_code == 1, r.output
    assert r.output.strip().splitlines() == [f"error: input {tmp_path / 'p.jsonl'} not found "
                                             "(a symlink loop)"]


def test_an_input_in_a_closed_folder_is_one_line():
    import os
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="pairkit-closed-"))
    try:
        (base / "closed").mkdir()
        (base / "closed" / "p.jsonl").write_text('{"anchor_id": 0}\n')
        if os.geteuid() == 0:
            os.chown(base, 65534, 65534)
        base.chmod(0o755)
        (base / "closed").chmod(0)
        r = _run_as_nobody(["report", "closed/p.jsonl", "-o", "rep"], base)
        if r is None:
            pytest.skip("no way to run as an unprivileged user here")
        code, out = r
        assert code == 1, out
        assert out.strip().splitlines() == ["error: input closed/p.jsonl is unreadable "
                                            "(Permission denied)"]
    finally:
        (base / "closed").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_a_fractional_id_is_named_with_the_store_too(pipeline, tmp_path):
    """Found by a bug hunt (2026-12-06): with the store, 30.5 was cut to 30 and the row's
    path comparison failed first, naming a mismatch instead of the bad id."""
    t = pd.read_parquet(pipeline.pairs)
    t["negative_id"] = t["negative_id"].astype(float)
    t.loc[t["negative_id"] >= 0, "negative_id"] += 0.5  # every row the check samples
    t.to_csv(tmp_path / "frac.csv", index=False)
    r = report(tmp_path / "frac.csv", "-o", tmp_path / "rep", "--store", pipeline.store)
    assert r.exit_code == 1
    assert "column negative_id must hold integer ids" in r.output, r.output
    from pairkit.core.store import Store
    from pairkit.core.table_items import table_mismatch
    from pairkit.errors import PairkitError

    with pytest.raises(PairkitError, match="column negative_id must hold integer ids"):
        table_mismatch(t, "triplet", Store.open(pipeline.store))  # not cut to a whole id


def _another_run_meanwhile(monkeypatch: pytest.MonkeyPatch, out: Path, title: str) -> None:
    """Make ``out`` appear (another report run finishing first) while this run builds."""
    import pairkit.report.build as build

    real = build.render_page

    def render(data: dict, page_title: str) -> str:
        page = real(data, page_title)
        out.mkdir(exist_ok=True)
        (out / "index.html").write_text(page.replace(page_title, title))
        return page

    monkeypatch.setattr(build, "render_page", render)


def test_a_report_written_meanwhile_is_not_replaced(pipeline, tmp_path, monkeypatch):
    """hunt-n 8: two runs to one new -o; the one finishing last replaced the other's report
    silently. Without --force it now stops with one line and leaves the other's report."""
    out = tmp_path / "rep"
    _another_run_meanwhile(monkeypatch, out, "FIRST")
    r = report(pipeline.eval_json, "-o", out, "--title", "SECOND")
    assert r.exit_code == 1, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "written by another run meanwhile" in lines[0], r.output
    assert "--force" in lines[0]
    assert "FIRST" in (out / "index.html").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
    # an empty folder at the start is no one's report: it is filled as before
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.undo()
    assert report(pipeline.eval_json, "-o", empty, "--title", "MINE").exit_code == 0
    assert "MINE" in (empty / "index.html").read_text()
    # with --force, an earlier report that appeared meanwhile is replaced
    _another_run_meanwhile(monkeypatch, tmp_path / "forced", "FIRST")
    r = report(pipeline.eval_json, "-o", tmp_path / "forced", "--title", "SECOND", "--force")
    assert r.exit_code == 0, r.output
    assert "SECOND" in (tmp_path / "forced" / "index.html").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_force_never_replaces_a_folder_that_appeared_meanwhile_and_is_no_report(
        pipeline, tmp_path, monkeypatch):
    """--force replaces only an earlier report: a folder of other files made while this
    run built its report is checked again before the swap and kept."""
    import pairkit.report.build as build

    out = tmp_path / "made-meanwhile"
    real = build.render_page

    def render(data: dict, page_title: str) -> str:
        out.mkdir(exist_ok=True)
        (out / "notes.txt").write_text("keep me")
        return real(data, page_title)

    monkeypatch.setattr(build, "render_page", render)
    r = report(pipeline.eval_json, "-o", out, "--force")
    assert r.exit_code == 1 and "not a pairkit report folder" in r.output, r.output
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "keep me"


def test_a_report_is_not_written_into_the_store_found_beside_its_table(pipeline, tmp_path):
    """Without --store the store is found next to the table; -o inside it is refused as
    with --store (a report folder in a store's folder)."""
    r = report(pipeline.pairs, "-o", pipeline.store / "rep")
    assert r.exit_code == 2 and "is inside the input" in r.output, r.output
    assert not (pipeline.store / "rep").exists()


def test_force_through_a_link_replaces_the_report_it_names(pipeline, tmp_path):
    """hunt-n 10: -o LINK --force (LINK -> an older report) renamed the link to
    .LINK.old-PID and left it there, and put a new folder in the link's place."""
    older = tmp_path / "reports" / "r1"
    assert report(pipeline.eval_json, "-o", older, "--title", "OLD").exit_code == 0
    link = tmp_path / "latest"
    link.symlink_to(older)
    r = report(pipeline.eval_json, "-o", link, "--force", "--title", "NEW")
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and link.resolve() == older.resolve()
    assert "NEW" in (older / "index.html").read_text()
    leftovers = [p.name for d in (tmp_path, older.parent) for p in d.iterdir()
                 if p.name.startswith(".")]
    assert leftovers == []


def test_temp_folders_of_killed_reports_are_swept_when_stale(pipeline, tmp_path):
    """hunt-n 10: a killed report leaves .REP.XXXXXXXX.tmp; a later report to that -o
    removes those a day old (a live run's are younger), and no one else's."""
    import os
    import time

    out = tmp_path / "rep"
    stale = tmp_path / ".rep.abcd1234.tmp"
    young = tmp_path / ".rep.efgh5678.tmp"
    other = tmp_path / ".other.abcd1234.tmp"
    for folder in (stale, young, other):
        (folder / "thumbs").mkdir(parents=True)
    old = time.time() - 2 * 86400
    for folder in (stale, other):
        os.utime(folder, (old, old))
    assert report(pipeline.eval_json, "-o", out).exit_code == 0
    assert not stale.exists() and young.exists() and other.exists()


def test_old_reports_left_by_a_killed_swap_are_swept_only_when_replaced(pipeline, tmp_path):
    """A kill during `report --force`'s swap (after the new report took its place, while
    the old one was being removed) left .REP.XXXXXXXX.old for good. A later report to that
    -o removes such folders a day old when the report itself is in place; an .old folder
    without the report beside it (killed between the two renames) holds the one copy and
    stays."""
    import os
    import time

    out = tmp_path / "rep"
    assert report(pipeline.eval_json, "-o", out).exit_code == 0
    stale = tmp_path / ".rep.abcd1234.old"
    young = tmp_path / ".rep.efgh5678.old"
    for folder in (stale, young):
        (folder / "rep" / "thumbs").mkdir(parents=True)
    old = time.time() - 2 * 86400
    os.utime(stale, (old, old))
    assert report(pipeline.eval_json, "-o", out, "--force").exit_code == 0
    assert not stale.exists() and young.exists()
    # the report missing: the .old folder is its only copy
    lone = tmp_path / ".gone.abcd1234.old"
    (lone / "gone").mkdir(parents=True)
    os.utime(lone, (old, old))
    assert report(pipeline.eval_json, "-o", tmp_path / "gone").exit_code == 0
    assert lone.exists()


def test_quiet_prints_nothing_on_success(tmp_path):
    """``-q`` is quiet as every command's (docs/development.md). Failed before: the last
    line (``open .../index.html``) was printed."""
    from pairkit.cli.main import app as pk_app

    image_store(tmp_path / "st", [f"a{i}.png" for i in range(6)], ["x"] * 6, dim=8)
    r = runner.invoke(pk_app, ["dedup", str(tmp_path / "st"), "-o", str(tmp_path / "d.csv"),
                               "-q"])
    assert (r.exit_code, r.output) == (0, "")
    r = report(tmp_path / "d.csv", "-o", tmp_path / "rep", "--store", tmp_path / "st", "-q")
    assert r.exit_code == 0, r.output
    # only the warning (never silenced): this store has no image folder for thumbnails
    assert [x.split(":")[0] for x in r.output.splitlines()] == ["warning"], r.output
    assert (tmp_path / "rep" / "index.html").is_file()


def test_an_empty_dedup_result_is_zero_groups_in_every_format(tmp_path):
    """dedup with no duplicates writes a 0-byte JSON Lines file (a header-only CSV, an
    empty parquet): each is a dedup tab of 0 groups, not an error."""
    from pairkit.cli.main import app as pk_app

    image_store(tmp_path / "st", [f"a{i}.png" for i in range(6)], ["x"] * 6, dim=8)
    lines = {}
    for name in ("d.csv", "d.parquet", "d.jsonl"):
        r = runner.invoke(pk_app, ["dedup", str(tmp_path / "st"), "-o", str(tmp_path / name),
                                   "-q"])
        assert r.exit_code == 0, r.output
        r = report(tmp_path / name, "-o", tmp_path / f"rep-{name}", "--store", tmp_path / "st")
        assert r.exit_code == 0, r.output
        lines[name] = r.output.splitlines()[0]
        data, _ = page_data(tmp_path / f"rep-{name}" / "index.html")
        (sec,) = data["sections"]
        assert sec["kind"] == "dedup" and sec["groups"] == []
        assert sec["summary"]["groups"] == 0 and sec["summary"]["members"] == 0
    assert (tmp_path / "d.jsonl").stat().st_size == 0
    assert lines["d.jsonl"] == lines["d.csv"].replace("d.csv", "d.jsonl")
    assert lines["d.jsonl"].endswith("0 of 0 groups, 0 copies to drop")


def test_a_big_dedup_group_shows_the_cap_and_decodes_only_those(tmp_path, monkeypatch):
    """A group of 500 files: the page holds the kept item and the 64 least similar copies,
    counts the other 435, and only those 65 images are decoded and written as thumbnails."""
    import pairkit.report.thumbs as thumbs
    from pairkit.report.dedup_view import MAX_COPIES_SHOWN
    from tests.report.kit import image

    n = 500
    images = tmp_path / "images"
    paths = [f"c/img{i:03d}.png" for i in range(n)]
    for i, p in enumerate(paths):
        image(images / p, i, size=(8, 8))
    image_store(tmp_path / "st", paths, ["x"] * n, image_root=images)
    sim = np.round(np.linspace(0.999, 0.9, n - 1), 6)  # id 1 most similar, id 499 least
    pd.DataFrame({"group": 0, "id": np.arange(n), "path": paths, "keep": [True] + [False] * (n - 1),
                  "similarity": [1.0, *sim], "match": ["keep"] + ["near"] * (n - 1)}
                 ).to_csv(tmp_path / "d.csv", index=False)
    decoded: list[object] = []
    real = thumbs.make_thumbnail

    def counting(src, dst, size):  # noqa: ANN001, ANN202
        decoded.append(src)
        return real(src, dst, size)

    monkeypatch.setattr(thumbs, "make_thumbnail", counting)
    out = tmp_path / "rep"
    r = report(tmp_path / "d.csv", "-o", out, "--store", tmp_path / "st")
    assert r.exit_code == 0, r.output
    data, _ = page_data(out / "index.html")
    (group,) = data["sections"][0]["groups"]
    shown = [data["items"][m[0]]["id"] for m in group["m"]]
    assert MAX_COPIES_SHOWN == 64
    assert shown == [0, *range(n - 1, n - 1 - 64, -1)]  # kept, then least similar first
    assert (group["n"], group["more"]) == (500, 435)
    assert len(data["items"]) == 65 and len(decoded) == 65
    assert len(list((out / "t").iterdir())) == 65
    assert all(it["thumb"] for it in data["items"])
    assert data["sections"][0]["summary"]["members"] == 500


@pytest.mark.parametrize("record", ["embedding", "projected"])
def test_thumbnails_of_a_dataset_store_come_from_its_image_column(tmp_path, record):
    """Found by a bug hunt (2026-12-07): a store embedded from a parquet table with
    ``embed --image-column pic`` (or projected from one) showed the thumbnails of the
    default pick, the table's ``image`` column: other pictures, no word said. Two stores of
    the one table, by different columns, get thumbnails of their own."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from pairkit.core.store_writer import write_store

    def png(colour: tuple[int, int, int]) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", (16, 16), colour).save(out, format="PNG")
        return out.getvalue()

    n = 4
    images = tmp_path / "images"
    images.mkdir()
    pq.write_table(pa.table({"image": [png((255, 0, 0))] * n, "pic": [png((0, 0, 255))] * n}),
                   images / "t.parquet")
    paths = [f"t.parquet/{i:08d}" for i in range(n)]
    items = pd.DataFrame({"path": paths, "source": paths, "view": 0})
    vectors = np.random.default_rng(0).normal(size=(n, 6)).astype(np.float32)
    for name, column in (("s", "pic"), ("d", None)):  # each table beside its store
        ident = {"model": "x", **({"image_column": column} if column else {})}
        write_store(tmp_path / name / "store", vectors, items, encoder={"name": "x"},
                    extra={"image_root": str(images), record: ident})
        pd.DataFrame({"group": 0, "id": range(n), "path": paths,
                      "keep": [True] + [False] * (n - 1), "similarity": 1.0}
                     ).to_csv(tmp_path / name / "d.csv", index=False)
    r = report(tmp_path / "s" / "d.csv", "-o", tmp_path / "rep",
               "--store", tmp_path / "s" / "store")
    assert r.exit_code == 0, r.output
    r = report(tmp_path / "s" / "d.csv", tmp_path / "d" / "d.csv", "-o", tmp_path / "both")
    assert r.exit_code == 0, r.output
    for out, want in (("rep", [(0, 0, 255)]), ("both", [(0, 0, 255), (255, 0, 0)])):
        data, _ = page_data(tmp_path / out / "index.html")
        seen = []
        for row in data["items"]:
            assert row["thumb"], row
            r_, g, b = Image.open(tmp_path / out / row["thumb"]).convert("RGB").getpixel((4, 4))
            seen.append((round(r_ / 255) * 255, round(g / 255) * 255, round(b / 255) * 255))
        assert sorted(set(seen)) == want, out
