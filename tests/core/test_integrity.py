"""Damaged and hostile stores are refused in one line: bit flips in every store file,
shard order, wrong types, oversize or special manifests, hostile tables."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.integrity import seal
from pairkit.core.manifest import MANIFEST, MAX_MANIFEST_BYTES
from pairkit.core.store import Store
from pairkit.core.store_writer import StoreWriter, prepare_store_dir
from pairkit.errors import PairkitError, StoreError
from tests.proc import run_pairkit

runner = CliRunner()


def _store(root):
    """Two shards of 6 rows, labels, file hashes and an errors file."""
    rng = np.random.default_rng(0)
    prepare_store_dir(root, force=False)
    with StoreWriter.create(root, 8, "float16", {"name": "test"}) as w:
        for k in range(2):
            ids = np.arange(6 * k, 6 * k + 6)
            w.set_errors([{"path": "broken.jpg", "reason": "empty file (0 bytes)"}])
            w.append(rng.normal(size=(6, 8)), pd.DataFrame({
                "path": [f"c{i % 3}/{i}.jpg" for i in ids], "view": np.zeros(6, int),
                "label": [f"c{i % 3}" for i in ids], "file_sha256": ["ab" * 32] * 6}))
    return Store.open(root)


def _read_all(root) -> None:
    store = Store.open(root)
    assert len(store.items) == store.count
    store.read_errors()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("flips") / "store"
    _store(root)
    _read_all(root)
    return root


def _store_files(root) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_file() and not p.name.startswith("."))


def test_store_files_are_all_checksummed(pristine):
    m = json.loads((pristine / MANIFEST).read_text())
    named = {s["file"] for s in m["shards"]} | {m["items"]["file"], m["errors"]["file"]}
    assert set(_store_files(pristine)) == named | {MANIFEST}


def test_bit_flips_in_every_store_file_are_refused(pristine, tmp_path):
    """Flipped bits at spread positions of every file: each one refused with StoreError."""
    rng = np.random.default_rng(1)
    work = tmp_path / "s"
    for name in _store_files(pristine):
        size = (pristine / name).stat().st_size
        flips = 60 if name == MANIFEST else 25
        # every region: header, middle, footer (parquet's metadata sits at the end)
        positions = np.unique(np.concatenate([
            rng.integers(0, min(size, 160), flips // 3), rng.integers(0, size, flips // 3),
            rng.integers(max(0, size - 160), size, flips - 2 * (flips // 3))]))
        for pos in positions:
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(pristine, work)
            data = bytearray((work / name).read_bytes())
            data[pos] ^= 1 << int(rng.integers(0, 8))
            (work / name).write_bytes(bytes(data))
            with pytest.raises(StoreError):
                _read_all(work)


def test_bit_flip_refused_by_the_cli_in_one_line(pristine, tmp_path):
    work = tmp_path / "s"
    shutil.copytree(pristine, work)
    name = Store.open(work).manifest["items"]["file"]
    data = bytearray((work / name).read_bytes())
    data[len(data) // 2] ^= 4
    (work / name).write_bytes(bytes(data))
    r = runner.invoke(app, ["mine", str(work), "--hard", "-o", str(tmp_path / "p.csv")])
    assert r.exit_code == 1
    assert r.output.strip() == f"error: store {work}: item table {name} checksum mismatch " \
        "(file changed or damaged)"


def _resealed(src, dst, change) -> None:
    """Copy a store and change its manifest as a tool that re-seals it would."""
    shutil.copytree(src, dst)
    m = json.loads((dst / MANIFEST).read_text())
    change(m)
    (dst / MANIFEST).write_text(json.dumps(seal(m)))


def test_swapped_shard_entries_are_refused(pristine, tmp_path):
    def swap(m):
        m["shards"] = m["shards"][::-1]

    _resealed(pristine, tmp_path / "s", swap)
    with pytest.raises(StoreError, match="shards out of order"):
        Store.open(tmp_path / "s")


def test_a_shard_entry_dropped_from_a_resealed_manifest_is_refused(pristine, tmp_path):
    """The last shard's entry removed and the manifest re-sealed (count and item table
    unchanged): the shards hold 6 rows where the manifest says 12; refused, never opened
    with rows nobody wrote (hunt 3b: dropping the check survived)."""
    def drop(m):
        m["shards"] = m["shards"][:1]

    _resealed(pristine, tmp_path / "s", drop)
    with pytest.raises(StoreError, match="shards hold 6 rows, manifest says 12"):
        Store.open(tmp_path / "s")


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.update(dim="8"), "field 'dim' must be an integer >= 1, got \"8\""),
    (lambda m: m.update(shards=None), "field 'shards' must be a list, got null"),
    (lambda m: m.update(count=True), "field 'count' must be an integer >= 0, got true"),
    (lambda m: m.update(dtype="float64"), "field 'dtype' must be float16 or float32"),
    (lambda m: m["shards"][0].update(file="../../etc/passwd"),
     "field shards[0].file must be embeddings-NNNNN.npy, got \"../../etc/passwd\""),
    (lambda m: m["items"].update(file="/etc/passwd"),
     "field items.file must be a pairkit file name in the store folder"),
    (lambda m: m["shards"][1].update(rows=-6), "field shards[1].'rows' must be an integer"),
    (lambda m: m["shards"][0].update(sha256=None), "shards[0].sha256 must be 64 hex digits"),
    (lambda m: m.update(format_version="2"), "field 'format_version' must be 1 or 2"),
    (lambda m: m.update(encoder=[1]), "field 'encoder' must be an object"),
])
def test_wrong_types_in_the_manifest(pristine, tmp_path, change, message):
    _resealed(pristine, tmp_path / "s", change)
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path / "s")
    assert message in str(info.value)
    r = runner.invoke(app, ["mine", str(tmp_path / "s"), "--hard", "-o", "-"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "internal error" not in r.output


def test_oversize_nested_and_special_manifests(pristine, tmp_path):
    big = tmp_path / "big"
    shutil.copytree(pristine, big)
    with open(big / MANIFEST, "r+b") as fh:
        fh.truncate(MAX_MANIFEST_BYTES + 1)  # sparse: refused on its size, never read
    with pytest.raises(StoreError, match="more than the 67,108,864 allowed"):
        Store.open(big)
    nested = tmp_path / "nested"
    shutil.copytree(pristine, nested)
    (nested / MANIFEST).write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(StoreError, match="nested too deeply"):
        Store.open(nested)
    fifo = tmp_path / "fifo"
    shutil.copytree(pristine, fifo)
    (fifo / MANIFEST).unlink()
    os.mkfifo(fifo / MANIFEST)
    with pytest.raises(StoreError, match="is not a regular file"):
        Store.open(fifo)  # a FIFO would block a plain open() forever
    shard = tmp_path / "shard"
    shutil.copytree(pristine, shard)
    (shard / "embeddings-00000.npy").unlink()
    os.symlink("/dev/zero", shard / "embeddings-00000.npy")
    with pytest.raises(StoreError, match="embeddings-00000.npy is not a regular file"):
        Store.open(shard)


def test_oversize_manifest_and_csv_refused_by_the_cli(pristine, tmp_path):
    """The probe's cases: a manifest far past the cap and a pair CSV with a 10-million-column
    header. Both stop with one line naming the cap (not minutes and gigabytes later)."""
    big = tmp_path / "big"
    shutil.copytree(pristine, big)
    with open(big / MANIFEST, "r+b") as fh:
        fh.truncate(552 << 20)
    r = run_pairkit("mine", big, "--hard", "-o", tmp_path / "p.csv", timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().endswith("is 578,813,952 bytes, more than the 67,108,864 allowed")
    wide = tmp_path / "wide.csv"
    with open(wide, "w") as fh:
        fh.write(",".join(f"c{i}" for i in range(10_000_000)) + "\n")
    r = run_pairkit("train", pristine, "--pairs", wide, "-o", tmp_path / "head", timeout=120)
    assert r.returncode == 1
    assert "the CSV header is longer than 1,048,576 bytes: not a pairkit table" in r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1


def test_csv_with_too_many_columns(tmp_path):
    from pairkit.core.tables import MAX_COLUMNS, read_table

    path = tmp_path / "t.csv"
    path.write_text(",".join(["a"] * (MAX_COLUMNS + 1)) + "\n" + ",".join(["1"] *
                                                                           (MAX_COLUMNS + 1)))
    with pytest.raises(PairkitError, match="10,001 columns, more than 10,000"):
        read_table(path)
    path.write_text("a,b\n1,2\n")
    assert read_table(path).shape == (1, 2)
