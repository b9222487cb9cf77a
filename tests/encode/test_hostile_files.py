"""embed on a hostile folder: names that are not UTF-8, FIFOs, devices, oversize files,
stale temp files of killed runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.encode.images import DecodeError, read_bytes
from tests.conftest import make_images
from tests.proc import run_pairkit

runner = CliRunner()
LATIN1 = b"caf\xe9.png"  # Latin-1 bytes: not valid UTF-8


def _non_utf8_name_supported(folder: Path) -> bool:
    try:
        fd = os.open(os.path.join(os.fsencode(folder), LATIN1), os.O_CREAT | os.O_WRONLY)
    except OSError:
        return False
    os.close(fd)
    os.unlink(os.path.join(os.fsencode(folder), LATIN1))
    return True


def test_non_utf8_name_is_skipped_with_a_lossless_record(tmp_path):
    images = tmp_path / "images"
    make_images(images, n_per_class=2, classes=2)
    if not _non_utf8_name_supported(images):
        pytest.skip("this file system refuses names that are not UTF-8")
    odd = os.path.join(os.fsencode(images / "class1"), LATIN1)
    Image.new("RGB", (20, 20), (200, 10, 10)).save(os.fsdecode(odd), format="PNG")
    out = tmp_path / "store"
    for _ in range(2):  # the rerun meets the same name again: still not fatal
        r = runner.invoke(app, ["embed", str(images), "-o", str(out), "--model", "fake",
                                "--views", "2"])
        assert r.exit_code == 0, r.output
        assert "1 file skipped" in r.output or "can't be embedded" in r.output
    store = Store.open(out)
    assert store.count == 8 and store.items["source"].nunique() == 4
    errors = store.read_errors()
    assert len(errors) == 1 and "not valid UTF-8" in errors[0]["reason"]
    assert os.fsencode(errors[0]["path"]) == b"class1/" + LATIN1
    line = (out / store.manifest["errors"]["file"]).read_bytes()
    assert line.decode("ascii")  # written with JSON escapes: readable by any parser


def test_fifo_and_dev_zero_are_skipped_not_read(tmp_path):
    """A FIFO named like an image hung embed forever and a symlink to /dev/zero grew it to
    4.5 GB: now both are skipped at once (a child process with a timeout guards a hang)."""
    images = tmp_path / "images"
    make_images(images, n_per_class=2, classes=1)
    os.mkfifo(images / "pipe.png")
    os.symlink("/dev/zero", images / "zero.png")
    big = images / "class0" / "big.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (200, 200, 3), np.uint8)).save(big)
    out = tmp_path / "store"
    r = run_pairkit("embed", images, "-o", out, "--model", "pixels", "--max-file-bytes",
                    "50000", "--workers", "0", timeout=240)
    assert r.returncode == 0, r.stderr
    reasons = {e["path"]: e["reason"] for e in Store.open(out).read_errors()}
    assert reasons == {"pipe.png": "not a regular file (a FIFO)",
                       "zero.png": "not a regular file (a character device)",
                       "class0/big.png": f"file too large ({big.stat().st_size:,} bytes > "
                                         "--max-file-bytes 50,000)"}
    assert Store.open(out).count == 2


def test_read_bytes_limits(tmp_path):
    (tmp_path / "a.png").write_bytes(b"x" * 100)
    assert read_bytes(tmp_path / "a.png", max_bytes=100) == b"x" * 100
    with pytest.raises(DecodeError, match="file too large"):
        read_bytes(tmp_path / "a.png", max_bytes=99)
    with pytest.raises(DecodeError, match="is a folder"):
        read_bytes(tmp_path)
    os.symlink(tmp_path / "loop.png", tmp_path / "loop.png")
    with pytest.raises(DecodeError, match="symlink loop"):
        read_bytes(tmp_path / "loop.png")


def test_max_file_bytes_must_be_positive(image_folder, tmp_path):
    r = runner.invoke(app, ["embed", str(image_folder), "-o", str(tmp_path / "s"), "--model",
                            "fake", "--max-file-bytes", "0"])
    assert r.exit_code == 2 and "--max-file-bytes must be >= 1, got 0" in r.output


def test_stale_temps_of_killed_runs_are_removed_by_the_next_writer(image_folder, tmp_path):
    out = tmp_path / "store"
    r = runner.invoke(app, ["embed", str(image_folder), "-o", str(out), "--model", "fake", "-q"])
    assert r.exit_code == 0, r.output
    stale = [".embeddings-00001.npy.abcd1234.tmp", ".items-00002.parquet.k2j4h5g6.tmp",
             ".manifest.json.zzzzzzzz.tmp", ".errors.jsonl.a1b2c3d4.tmp"]
    kept = [".notes.txt.abcd1234.tmp", "my-notes.txt"]  # not pairkit's: never touched
    for name in stale + kept:
        (out / name).write_bytes(b"left by kill -9")
    np.save(out / "embeddings-00007.npy", np.zeros((2, 48), np.float16))  # never committed
    Image.new("RGB", (20, 20), (1, 2, 3)).save(image_folder / "class0" / "new.png")
    r = runner.invoke(app, ["embed", str(image_folder), "-o", str(out), "--model", "fake", "-q"])
    assert r.exit_code == 0, r.output
    names = {p.name for p in out.iterdir()}
    assert not names & set(stale) and "embeddings-00007.npy" not in names
    assert set(kept) <= names
    assert Store.open(out).count == 13
    assert json.loads((out / "manifest.json").read_text())["format_version"] == 2


def test_backslash_names_dedup_would_refuse_are_skipped_and_dedup_works(tmp_path):
    """``..\\up.png`` and ``\\lead.png`` are legal POSIX names, but item paths read ``\\``
    as a separator: embed stored them and dedup then refused the whole store (exit 1)."""
    images = tmp_path / "images"
    make_images(images, n_per_class=3, classes=2)
    arr = np.random.default_rng(0).integers(0, 255, (40, 40, 3), np.uint8)
    for name in ("..\\up.png", "\\lead.png", "a\\b.png"):
        Image.fromarray(arr).save(images / name)
    out = tmp_path / "store"
    r = runner.invoke(app, ["embed", str(images), "-o", str(out), "--model", "pixels"])
    assert r.exit_code == 0, r.output
    assert "skipped 2," in r.output, r.output
    store = Store.open(out)
    reasons = {e["path"]: e["reason"] for e in store.read_errors()}
    assert set(reasons) == {"..\\up.png", "\\lead.png"}
    assert all(r.startswith("file name holds a backslash: rename it") for r in reasons.values())
    assert "a\\b.png" in set(store.items["path"])  # a backslash dedup reads: kept
    r = runner.invoke(app, ["dedup", str(out), "-o", str(tmp_path / "d.csv")])
    assert r.exit_code == 0, r.output
