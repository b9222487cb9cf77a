"""embed, import, mine, dedup, eval and report with s3:// stores and outputs, against a
real S3 server process (moto_server on 127.0.0.1, tests/s3server.py): the same tables,
stores and metrics as with local folders; two writers of one store: one commits, the
other stops with one line; a URL never becomes a local folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.core.tables import read_table
from tests.conftest import make_images, random_store
from tests.proc import REPO, child_env

runner = CliRunner()


def ok(*args: object) -> str:
    r = runner.invoke(app, [*map(str, args)])
    assert r.exit_code == 0, r.output
    return r.stdout


def fails(*args: object) -> tuple[int, list[str]]:
    r = runner.invoke(app, [*map(str, args)])
    return r.exit_code, [line for line in r.output.splitlines() if line.strip()]


@pytest.fixture
def pair(s3, tmp_path):
    """A local store and its copy on S3 (``pairkit import`` into both)."""
    st = random_store(tmp_path / "src", n_sources=30, views=2, dim=16, classes=3)
    np.save(tmp_path / "emb.npy", st.vectors())
    st.items.to_parquet(tmp_path / "items.parquet")
    common = [tmp_path / "emb.npy", "--items", tmp_path / "items.parquet", "--dtype", "float32"]
    ok("import", *common, "-o", tmp_path / "local")
    ok("import", *common, "-o", f"{s3}/store")
    return tmp_path / "local", f"{s3}/store"


def test_import_to_s3_gives_the_local_store(pair):
    local, remote = pair
    a, b = Store.open(local), Store.open(remote)
    np.testing.assert_array_equal(a.vectors(), b.vectors())
    pd.testing.assert_frame_equal(a.items, b.items)
    assert a.content_id == b.content_id


@pytest.mark.parametrize("extra", [[], ["--filter-false-negatives", "--fn-mode", "keep"]])
def test_mine_s3_store_to_s3_tables(pair, s3, tmp_path, extra):
    local, remote = pair
    ok("mine", local, "--hard", *extra, "-o", tmp_path / "p.parquet", "-q")
    ok("mine", remote, "--hard", *extra, "-o", f"{s3}/pairs.parquet", "-q")
    ok("mine", remote, "--hard", *extra, "-o", f"{s3}/pairs/", "--batch-size", "16", "-q")
    want = pd.read_parquet(tmp_path / "p.parquet")
    pd.testing.assert_frame_equal(read_table(f"{s3}/pairs.parquet"), want)
    pd.testing.assert_frame_equal(read_table(f"{s3}/pairs/"), want)
    code, lines = fails("mine", remote, "--hard", "-o", f"{s3}/pairs.parquet")
    assert code == 1 and lines == [f"error: output {s3}/pairs.parquet exists; pass --force "
                                   "to overwrite it"]


def test_dedup_and_eval_on_s3(pair, s3, tmp_path):
    local, remote = pair
    ok("dedup", local, "-t", "0.9", "-o", tmp_path / "d.csv", "-q")
    ok("dedup", remote, "-t", "0.9", "-o", f"{s3}/d.csv", "-q")
    pd.testing.assert_frame_equal(read_table(f"{s3}/d.csv"), read_table(tmp_path / "d.csv"))
    args = ["--json", "-q", "--knn-k", "5", "--metrics", "knn,retrieval,geometry"]
    assert ok("eval", remote, *args) == ok("eval", local, *args)
    assert ok("eval", remote, "--against", remote, *args) == \
        ok("eval", local, "--against", local, *args)


def test_report_of_s3_tables_and_store(pair, s3, tmp_path):
    _, remote = pair
    ok("mine", remote, "--hard", "-o", f"{s3}/pairs.parquet", "-q")
    ok("dedup", remote, "-t", "0.9", "-o", f"{s3}/d.parquet", "-q")
    ok("report", f"{s3}/pairs.parquet", f"{s3}/d.parquet", "--store", remote, "-o",
       tmp_path / "rep", "-q")
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "pairs.parquet" in page and "d.parquet" in page


def test_embed_into_s3_equals_local_and_resumes(s3, tmp_path):
    make_images(tmp_path / "img", n_per_class=3, classes=2)
    (tmp_path / "img" / "class0" / "broken.jpg").write_bytes(b"\xff\xd8 not an image")
    args = ["--model", "fake", "--views", "2", "--shard-rows", "4", "-q"]
    ok("embed", tmp_path / "img", "-o", tmp_path / "local", *args)
    ok("embed", tmp_path / "img", "-o", f"{s3}/st", *args)
    a, b = Store.open(tmp_path / "local"), Store.open(f"{s3}/st")
    np.testing.assert_array_equal(a.vectors(), b.vectors())
    pd.testing.assert_frame_equal(a.items, b.items)
    assert a.read_errors() == b.read_errors() and len(b.read_errors()) == 1
    assert [s.rows for s in a.shards] == [s.rows for s in b.shards]
    r = runner.invoke(app, ["embed", str(tmp_path / "img"), "-o", f"{s3}/st", *args[:-1]])
    assert r.exit_code == 0 and "nothing to embed: all 6 images are already in" in r.output


def test_embed_images_from_s3(s3, tmp_path):
    """An image prefix on S3 embeds like the same folder on disk (paths are the keys
    below the prefix; labels from the first folder); the store records the URL as its
    image root."""
    import s3fs

    make_images(tmp_path / "img", n_per_class=3, classes=2)
    (tmp_path / "img" / ".hidden").mkdir()
    (tmp_path / "img" / ".hidden" / "x.png").write_bytes((tmp_path / "img" / "class0" /
                                                          "img1.png").read_bytes())
    f = s3fs.S3FileSystem(client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    for p in sorted(q for q in (tmp_path / "img").rglob("*") if q.is_file()):
        f.pipe_file(f"{s3[5:]}/photos/{p.relative_to(tmp_path / 'img').as_posix()}",
                    p.read_bytes())
    f.pipe_file(f"{s3[5:]}/photos/notes.txt", b"not an image")
    args = ["--model", "fake", "--labels", "folder", "-q"]
    ok("embed", tmp_path / "img", "-o", tmp_path / "local", *args)
    ok("embed", f"{s3}/photos", "-o", f"{s3}/st", *args)
    a, b = Store.open(tmp_path / "local"), Store.open(f"{s3}/st")
    np.testing.assert_array_equal(a.vectors(), b.vectors())
    pd.testing.assert_frame_equal(a.items, b.items)
    assert b.manifest["image_root"] == f"{s3}/photos" and len(b.items) == 6
    r = runner.invoke(app, ["embed", f"{s3}/photos", "-o", f"{s3}/st", *args[:-1]])
    assert r.exit_code == 0 and "nothing to embed" in r.output, r.output
    code, lines = fails("embed", tmp_path / "img", "-o", f"{s3}/st", *args)
    assert code == 1 and lines == [f"error: store {s3}/st holds images of {s3}/photos, not "
                                   f"{tmp_path / 'img'}; embed into another -o, or pass "
                                   "--force to replace the store"]


def test_embed_webdataset_shards_from_s3(s3, tmp_path):
    """Tar shards on S3 (a brace pattern with a gap): headers listed through ranged reads,
    each member one ranged GET; the same store as from the local shards."""
    import s3fs

    from tests.encode.test_webdataset import write_shards

    images = make_images(tmp_path / "img", n_per_class=4, classes=3)
    shards = write_shards(tmp_path / "wds", images, per_shard=5)
    f = s3fs.S3FileSystem(client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    for p in shards:
        f.pipe_file(f"{s3[5:]}/wds/{p.name}", p.read_bytes())
    ok("embed", tmp_path / "wds" / "{00000..00003}.tar", "-o", tmp_path / "local", "--model",
       "fake", "-q")
    ok("embed", f"{s3}/wds/{{00000..00003}}.tar", "-o", f"{s3}/st", "--model", "fake", "-q")
    a, b = Store.open(tmp_path / "local"), Store.open(f"{s3}/st")
    np.testing.assert_array_equal(a.vectors(), b.vectors())
    pd.testing.assert_frame_equal(a.items, b.items)
    assert b.items["label"].notna().all() and b.manifest["labels"] == "webdataset"
    assert b.read_errors() == [{"path": f"{s3}/wds/00003.tar", "reason": "tar shard not found"}]


def test_two_importers_of_one_s3_store(s3, tmp_path):
    """Two ``pairkit import`` processes into one URL at the same time: exactly one
    commits; the other stops with one line (it lost the conditional write, or it came
    second and found the store), and the store is the winner's, whole."""
    import subprocess
    import sys

    st = random_store(tmp_path / "src", n_sources=400, views=2, dim=32)
    np.save(tmp_path / "emb.npy", st.vectors())
    st.items.to_parquet(tmp_path / "items.parquet")
    cmd = [sys.executable, "-m", "pairkit", "import", str(tmp_path / "emb.npy"), "--items",
           str(tmp_path / "items.parquet"), "-o", f"{s3}/st"]
    env = child_env()
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outs
    loser = next(err for p, (_, err) in zip(procs, outs, strict=True) if p.returncode == 1)
    lines = [line for line in loser.splitlines() if line.strip()]
    assert len(lines) == 1 and (
        "was committed by another writer while this one was writing" in lines[0]
        or f"store {s3}/st exists; pass --force" in lines[0]), lines
    again = Store.open(f"{s3}/st")
    assert again.count == 800
    tokens = {s.file.split("-")[-1] for s in again.shards}
    assert len(tokens) == 1


def test_urls_are_refused_where_they_cannot_work(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    st = random_store(tmp_path / "src", n_sources=10)
    np.save(tmp_path / "emb.npy", st.vectors())
    st.items.to_parquet(tmp_path / "items.parquet")
    code, lines = fails("import", "emb.npy", "--items", "items.parquet", "-o", "gs://b/st")
    assert code == 1 and len(lines) == 1 and "gs://" in lines[0], lines
    code, lines = fails("mine", f"{s3}/none", "--hard", "-o", "p.parquet")
    assert code == 1 and lines == [f"error: {s3}/none is not a pairkit store: no "
                                   "manifest.json"]
    code, lines = fails("mine", str(tmp_path / "src"), "--hard", "-o", "p.parquet",
                        "--stats", f"{s3}/stats.json")
    assert code != 0 and len(lines) == 1, lines
    code, lines = fails("index", f"{s3}/st")
    assert code != 0 and len(lines) == 1, lines
    ok("mine", "src", "--hard", "-o", "p.csv", "-q")
    for args in (["report", "p.csv", "-o", "s3://b/rep"],
                 ["eval", "src", "--plot", "s3://b/plots", "-q"],
                 ["train", "src", "--pairs", "p.csv", "-o", "s3://b/head", "--epochs", "1"]):
        code, lines = fails(*args)
        assert code != 0 and len(lines) == 1 and "s3://b/" in lines[0], (args, lines)
    assert sorted(os.listdir(tmp_path)) == ["emb.npy", "items.parquet", "p.csv", "src"]
    assert not Path("s3:").exists() and not Path("gs:").exists()


def test_info_and_search_of_an_s3_store(pair, s3):
    """info and search take a URL as every command does: the same facts and neighbours."""
    import json

    local, remote = pair
    a = json.loads(ok("info", local, "--json"))
    b = json.loads(ok("info", remote, "--json"))
    for key in ("rows", "sources", "views", "dim", "dtype", "labels", "content_id", "bytes",
                "vector_bytes", "checksums"):
        assert a[key] == b[key], key
    assert b["store"] == remote and b["indexes"] == []
    hits_local = [json.loads(x) for x in ok("search", local, "0", "7", "-k", "3").splitlines()]
    hits_remote = [json.loads(x) for x in ok("search", remote, "0", "7", "-k", "3").splitlines()]
    assert [(h["query"], h["id"]) for h in hits_local] == \
        [(h["query"], h["id"]) for h in hits_remote]
    ok("search", remote, "0", "7", "-k", "3", "-o", f"{s3}/hits.parquet")
    assert read_table(f"{s3}/hits.parquet")["id"].tolist() == [h["id"] for h in hits_local]


def test_a_missing_bucket_is_named(s3, tmp_path):
    """Found by a bug hunt (2026-12-06): a store in a missing bucket was "not a pairkit
    store", and a table to one failed only once the whole run was done."""
    st = random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    code, lines = fails("info", "s3://no-such-bucket-pk/store")
    assert code == 1 and lines == ["error: s3://no-such-bucket-pk/store: bucket "
                                   "no-such-bucket-pk does not exist"], lines
    for out in ("s3://no-such-bucket-pk/p.parquet", "s3://no-such-bucket-pk/p/"):
        code, lines = fails("mine", st.root, "--hard", "-o", out, "-q")
        assert code == 1 and lines[-1].endswith("bucket no-such-bucket-pk does not exist"), \
            lines
        assert "mined" not in " ".join(lines)
    ok("mine", st.root, "--hard", "-o", f"{s3}/p.parquet", "-q")  # an existing bucket


def test_embed_images_api_into_s3(s3, tmp_path):
    """Found by a bug hunt (2026-12-06): ``pairkit.embed_images`` refused an ``s3://``
    store (Path() made it ``s3:/...``), which the command writes."""
    import pairkit

    make_images(tmp_path / "img", n_per_class=1, classes=2)
    st = pairkit.embed_images(tmp_path / "img", f"{s3}/st", model="fake")
    assert st.count == 2 and Store.open(f"{s3}/st").count == 2


def test_project_an_s3_store_through_the_command(pair, s3, tmp_path):
    """Found by a bug hunt (2026-12-06): ``pairkit project s3://...`` was refused (exit 2,
    the URL made a Path ``s3:/...``) although ``project_store`` takes it and every store
    argument takes a URL; its output may be a URL too."""
    import pairkit

    local, remote = pair
    head = tmp_path / "head"
    pairkit.train_head(str(local), head, epochs=1, batch_size=16, out_dim=8,
                       relation="instance")
    ok("project", local, "--head", head, "-o", tmp_path / "p_local", "-q")
    ok("project", remote, "--head", head, "-o", tmp_path / "p_remote", "-q")
    ok("project", remote, "--head", head, "-o", f"{s3}/p", "-q")
    want = Store.open(tmp_path / "p_local").vectors()
    np.testing.assert_array_equal(Store.open(tmp_path / "p_remote").vectors(), want)
    np.testing.assert_array_equal(Store.open(f"{s3}/p").vectors(), want)
