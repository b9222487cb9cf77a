"""pairkit train and pairkit project from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.core.tables import iter_jsonl
from pairkit.train.head import load_head
from tests.conftest import random_store
from tests.train.helpers import instance_triplets

runner = CliRunner()
FAST = ["--epochs", "2", "--batch-size", "16", "--head", "mlp", "--out-dim", "8",
        "--device", "cpu"]


def test_train_then_project(tmp_path):
    store = random_store(tmp_path / "s", n_sources=20, views=2, dim=12, classes=4)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "--val-fraction", "0.2", *FAST])
    assert r.exit_code == 0, r.stderr
    assert "epoch 2: loss" in r.stderr and "pairs/s" in r.stderr
    assert ("trained mlp head 12->8 (outputs whitened to 8 dims) with infonce for 2 epochs"
            in r.stderr)  # the default pair whitening, every direction
    # the summary's rate is over all epochs: total pairs / total seconds of the log
    log = [json.loads(x) for x in (tmp_path / "h" / "train_log.jsonl").read_text().splitlines()]
    epochs = [x for x in log if "epoch" in x]
    want = sum(x["pairs"] for x in epochs) / sum(x["seconds"] for x in epochs)
    import re

    said = re.search(r"([\d,]+) pairs/s over all epochs", r.stderr)
    assert said is not None, r.stderr
    assert abs(int(said.group(1).replace(",", "")) - want) <= max(1.0, 1e-3 * want)
    r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head", str(tmp_path / "h"),
                            "-o", str(tmp_path / "p")])
    assert r.exit_code == 0, r.stderr
    out = Store.open(tmp_path / "p")
    assert (out.count, out.dim, out.dtype) == (store.count, 8, store.dtype)
    assert out.items.equals(store.items)
    assert out.manifest["projected"]["from_content_id"] == store.content_id
    assert out.encoder["head"]["head"]["out_dim"] == 8
    want = load_head(tmp_path / "h").apply(store.vectors())
    np.testing.assert_allclose(out.vectors(), want, atol=1e-6)
    # blocks of 7 rows (the last one short): each block's rows where they belong
    r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head", str(tmp_path / "h"),
                            "-o", str(tmp_path / "p7"), "--batch-size", "7"])
    assert r.exit_code == 0, r.stderr
    np.testing.assert_allclose(Store.open(tmp_path / "p7").vectors(), want, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(want, axis=1), 1.0, atol=1e-5)
    # an existing store or file at -o: refused before the head loads or a row is read
    import pairkit.train.head as head_module

    real_load = head_module.load_head
    head_module.load_head = lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded"))
    try:
        r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head",
                                str(tmp_path / "h"), "-o", str(tmp_path / "p")])
        assert r.exit_code == 1 and "exists; pass --force" in r.stderr, r.output
        (tmp_path / "a.csv").write_text("x")
        r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head",
                                str(tmp_path / "h"), "-o", str(tmp_path / "a.csv")])
        assert r.exit_code == 1 and "is an existing file" in r.stderr, r.output
    finally:
        head_module.load_head = real_load
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", *FAST])
    assert r.exit_code == 1
    assert r.stderr.strip() == ("error: head " + str(tmp_path / "h") + " exists; pass --force "
                                "to replace it or --resume to continue it")


def test_project_refuses_head_of_another_dimension(tmp_path):
    random_store(tmp_path / "s", n_sources=10, views=2, dim=12)
    random_store(tmp_path / "t", n_sources=10, views=2, dim=6)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "-q", *FAST])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["project", str(tmp_path / "t"), "--head", str(tmp_path / "h"),
                            "-o", str(tmp_path / "p")])
    assert r.exit_code == 1
    assert "takes vectors of dim 12, store" in r.stderr and "has dim 6" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "p").exists()
    r = runner.invoke(app, ["project", str(tmp_path / "t"), "--head", str(tmp_path / "nope"),
                            "-o", str(tmp_path / "p")])
    assert r.exit_code == 1 and "not found" in r.stderr


def test_train_from_a_table_on_stdin(tmp_path):
    store = random_store(tmp_path / "s", n_sources=16, views=2, dim=12)
    table = instance_triplets(store, k=2, keep_flagged=True)
    text = "\n".join(iter_jsonl(table)) + "\n"
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "--pairs", "-", "-o",
                            str(tmp_path / "h"), "--loss", "triplet", "--fn-mode", "attract",
                            "-q", "--json", *FAST], input=text)
    assert r.exit_code == 0, r.stderr
    last = json.loads(r.stdout)
    assert last["epoch"] == 2 and np.isfinite(last["loss"])
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["pairs"]["kind"] == "triplet" and config["pairs"]["table"] == "-"
    assert config["training"]["fn_mode"] == "attract"


def test_train_from_a_parquet_table_on_stdin(tmp_path):
    """``cat pairs.parquet | pairkit train --pairs -``: stdin's format is told by its
    content (found by the pipes-and-Ray hunt, 2026-12-07: refused as broken JSON)."""
    store = random_store(tmp_path / "s", n_sources=16, views=2, dim=12)
    instance_triplets(store, k=2).to_parquet(tmp_path / "p.parquet")
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "--pairs", "-", "-o",
                            str(tmp_path / "h"), "-q", "--json", *FAST],
                      input=(tmp_path / "p.parquet").read_bytes())
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["epoch"] == 2


def test_train_refuses_a_table_from_another_store(tmp_path):
    a = random_store(tmp_path / "a", n_sources=10, views=2, dim=8, seed=0)
    random_store(tmp_path / "b", n_sources=10, views=2, dim=8, seed=1)
    instance_triplets(a, k=2).to_parquet(tmp_path / "pairs.parquet")
    r = runner.invoke(app, ["train", str(tmp_path / "b"), "--pairs",
                            str(tmp_path / "pairs.parquet"), "-o", str(tmp_path / "h"), *FAST])
    assert r.exit_code == 1
    assert "pair table came from another store" in r.stderr
    assert not (tmp_path / "h").exists()
    table = instance_triplets(a, k=2).drop(columns="store_id")
    table.to_csv(tmp_path / "pairs.csv", index=False)
    r = runner.invoke(app, ["train", str(tmp_path / "a"), "--pairs", str(tmp_path / "pairs.csv"),
                            "-o", str(tmp_path / "h"), "-q", *FAST])
    assert r.exit_code == 0, r.stderr
    assert "warning: pair table has no store_id column" in r.stderr


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_table_of_blank_store_id_cells_is_accepted_with_a_warning(tmp_path, suffix):
    """docs/train.md step 1: a table whose store_id cells are all empty is accepted with
    a warning. A blanked column read back from CSV is null, but from JSON Lines or parquet
    it is "": that was refused as another store's table, 'error: pair table came from
    another store (store_id , this store is ...)'."""
    a = random_store(tmp_path / "a", n_sources=10, views=2, dim=8, seed=0)
    table = instance_triplets(a, k=2).assign(store_id="")
    path = tmp_path / f"pairs{suffix}"
    if suffix == ".jsonl":
        table.to_json(path, orient="records", lines=True)
    else:
        table.to_parquet(path)
    r = runner.invoke(app, ["train", str(tmp_path / "a"), "--pairs", str(path),
                            "-o", str(tmp_path / "h"), "-q", *FAST])
    assert r.exit_code == 0, r.stderr
    assert r.stderr.strip().splitlines() == [
        "warning: pair table has no store_id (its column is empty): can't check it belongs "
        "to this store"]


def test_train_refuses_a_table_of_the_same_vectors_with_other_items(tmp_path):
    """Found by a CLI bug hunt (2026-12-06): the content id hashes the rows, so one .npy
    imported with two item tables gives two stores of one id; train took the other
    store's table (its sources, views and paths not this store's) where report refused it.
    The paths of a sample of rows must be the store's."""
    import pandas as pd

    rng = np.random.default_rng(0)
    np.save(tmp_path / "emb.npy", rng.normal(size=(40, 8)).astype(np.float32))
    pd.DataFrame({"path": [f"c{i % 4}/img{i}.png" for i in range(40)]}).to_csv(
        tmp_path / "a.csv", index=False)
    pd.DataFrame({"path": [f"src{i // 2}.png" for i in range(40)],
                  "view": [i % 2 for i in range(40)]}).to_csv(tmp_path / "b.csv", index=False)
    for name in ("a", "b"):
        r = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                str(tmp_path / f"{name}.csv"), "-o", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
    assert Store.open(tmp_path / "a").content_id == Store.open(tmp_path / "b").content_id
    r = runner.invoke(app, ["mine", str(tmp_path / "b"), "--hard", "-o",
                            str(tmp_path / "p.parquet"), "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["train", str(tmp_path / "a"), "--pairs", str(tmp_path / "p.parquet"),
                            "-o", str(tmp_path / "h"), *FAST])
    assert r.exit_code == 1, r.output
    assert "the table says 'src" in r.stderr and "doesn't fit this store" in r.stderr
    assert not (tmp_path / "h").exists()
    r = runner.invoke(app, ["train", str(tmp_path / "b"), "--pairs", str(tmp_path / "p.parquet"),
                            "-o", str(tmp_path / "h"), "-q", *FAST])
    assert r.exit_code == 0, r.stderr


def test_another_stores_table_is_refused_from_its_first_row(tmp_path, monkeypatch):
    """Issue 20.10: a 557 MB pairs file of another store cost 30 s and 5.1 GB before train
    refused it for its store id. The first row decides: the rest (here unparseable, as it
    would be unaffordable) is never parsed."""
    import pandas as pd

    from pairkit.core import tables

    a = random_store(tmp_path / "a", n_sources=10, views=2, dim=8, seed=0)
    random_store(tmp_path / "b", n_sources=10, views=2, dim=8, seed=1)
    first = next(iter_jsonl(instance_triplets(a, k=2).head(1)))
    (tmp_path / "p.jsonl").write_text(first + "\n" + "{not json\n" * 5000)
    parsed = []
    real = pd.read_json
    monkeypatch.setattr(pd, "read_json", lambda *a, **k: parsed.append(1) or real(*a, **k))
    monkeypatch.setattr(tables, "JSONL_CHUNK_ROWS", 100)
    r = runner.invoke(app, ["train", str(tmp_path / "b"), "--pairs", str(tmp_path / "p.jsonl"),
                            "-o", str(tmp_path / "h"), *FAST])
    assert r.exit_code == 1
    assert "pair table came from another store" in r.stderr and parsed == []
    assert not (tmp_path / "h").exists()


def test_usage_errors(tmp_path):
    random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h")])
    assert r.exit_code == 2 and "give a pair table with --pairs" in r.stderr
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "--loss", "ntxent"])
    assert r.exit_code == 2 and "'ntxent' is not one of 'infonce'" in r.stderr
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "--temperature", "0"])
    assert r.exit_code == 2 and "--temperature must be > 0, got 0.0" in r.stderr
    for args, message in ((["--epochs", "0"], "--epochs must be >= 1, got 0"),
                          (["--fn-mode", "drop"], "'drop' is not one of 'eliminate'"),
                          (["--device", "gpu"], "--device must be auto, cpu, cuda or cuda:N"),
                          (["--precision", "fp8"], "'fp8' is not one of 'auto'")):
        r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                                "--relation", "instance", *args])
        assert r.exit_code == 2 and message in r.stderr, (args, r.stderr)
        assert not (tmp_path / "h").exists()
    r = runner.invoke(app, ["train", str(tmp_path / "missing"), "-o", str(tmp_path / "h"),
                            "--relation", "instance"])
    assert r.exit_code == 1 and "not found" in r.stderr
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "label", "--resume", "--force"])
    assert r.exit_code == 2 and "contradict" in r.stderr


def test_train_whiten_then_project(tmp_path):
    store = random_store(tmp_path / "s", n_sources=40, views=2, dim=12, classes=4)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "--whiten", "0.25", *FAST])
    assert r.exit_code == 0, r.stderr
    head = load_head(tmp_path / "h")
    assert head.whitening is not None and 1 <= head.out_dim <= 8
    assert (f"trained mlp head 12->8 (outputs whitened to {head.out_dim} dims) with infonce"
            in r.stderr)
    r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head", str(tmp_path / "h"),
                            "-o", str(tmp_path / "p")])
    assert r.exit_code == 0, r.stderr
    out = Store.open(tmp_path / "p")
    assert out.dim == head.out_dim
    assert out.encoder["head"]["whitening"]["dims"] == head.out_dim
    assert len(out.encoder["head"]["whitening_sha256"]) == 64
    np.testing.assert_allclose(out.vectors(), head.apply(store.vectors()), atol=2e-3)
    # too few rows for the output dims: not whitened, and the summary says why
    random_store(tmp_path / "s2", n_sources=3, views=2, dim=12, classes=3)
    r = runner.invoke(app, ["train", str(tmp_path / "s2"), "-o", str(tmp_path / "h2"),
                            "--relation", "instance", "--whiten", "0.25", *FAST])
    assert r.exit_code == 0, r.stderr
    assert "(outputs not whitened: 6 training rows for 8 output dims, under 2 per dim)" in r.stderr
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h3"),
                            "--relation", "instance", "--whiten", "0.9", *FAST])
    assert r.exit_code == 2 and "--whiten must be in [0, 0.5]" in r.stderr


def train_and_project(tmp_path: Path) -> None:
    """A one-epoch head on the store ``tmp_path/s`` (``h``), and the store projected
    through it (``p``)."""
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "--epochs", "1", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head", str(tmp_path / "h"),
                            "-o", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output


def test_project_keeps_the_image_root_and_labels_spec(tmp_path):
    """Found by a bug hunt (2026-12-06): the projected store's manifest lost image_root
    (and the labels spec), so pairs mined from it could not be loaded as images
    ("has no image_root (made by import?)") though its items are the input's."""
    import pandas as pd

    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(0)
    items = pd.DataFrame({"path": [f"c{i % 3}/s{i // 2}.png" for i in range(24)],
                          "source": [f"s{i // 2}" for i in range(24)],
                          "view": [i % 2 for i in range(24)],
                          "label": [f"c{i % 3}" for i in range(24)]})
    write_store(tmp_path / "s", rng.normal(size=(24, 6)).astype(np.float32), items,
                encoder={"name": "x"},
                extra={"image_root": str(tmp_path / "images"), "labels": "folder"},
                dtype="float16")
    train_and_project(tmp_path)
    m = Store.open(tmp_path / "p").manifest
    assert m["image_root"] == str(tmp_path / "images") and m["labels"] == "folder"
    # the input's precision kept (no --dtype), and the store the head was trained on named
    assert Store.open(tmp_path / "p").dtype == "float16"
    trained_on = Store.open(tmp_path / "s").content_id
    assert m["projected"]["trained_on"] == m["encoder"]["head"]["trained_on"] == trained_on


def test_a_head_with_non_finite_or_zero_outputs_is_refused_in_one_line(tmp_path):
    """Found by a bug hunt (2026-12-06): a head.safetensors of NaN (or 1e30) weights made
    eval --head end in "internal error" and project write a store of NaN vectors (exit
    0); a whitening whose projection was all zeros passed the finiteness check, project
    wrote zero vectors and eval --head reported metrics of them. Each is refused in one
    line, exit 1, nothing written."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from pairkit.train.config import TrainConfig
    from pairkit.train.loop import train_head

    store = random_store(tmp_path / "s", n_sources=20, views=2, dim=12, classes=4)
    train_head(store, tmp_path / "h", TrainConfig(relation="instance", epochs=1, batch_size=16,
                                                  device="cpu"))

    def damaged(name, file, value):
        shutil.copytree(tmp_path / "h", tmp_path / name)
        w = load_file(str(tmp_path / name / file))
        for key in ["projection"] if file == "whitening.safetensors" else list(w):
            w[key][:] = value
        save_file(w, str(tmp_path / name / file))
        return tmp_path / name

    heads = {"non-finite": [damaged("nan", "head.safetensors", np.nan),
                            damaged("big", "head.safetensors", 1e30)],
             "zero": [damaged("zero", "whitening.safetensors", 0.0)]}
    for what, folders in heads.items():
        for head in folders:
            for args in (["eval", str(tmp_path / "s"), "--head", str(head), "-q"],
                         ["project", str(tmp_path / "s"), "--head", str(head), "-o",
                          str(tmp_path / f"p_{head.name}")]):
                r = runner.invoke(app, args)
                assert r.exit_code == 1, (args, r.output)
                lines = r.stderr.strip().splitlines()
                assert len(lines) == 1 and what in lines[0], (args, r.stderr)
                assert "internal error" not in r.stderr
            assert not (tmp_path / f"p_{head.name}").exists()


def test_pair_whitening_above_the_heads_dims_is_refused(tmp_path):
    """Found by a bug hunt (2026-12-06): --pair-whitening 100 on a head of 8 output dims
    fitted 8 and recorded 100 (training.pair_whitening), without a word; it is refused,
    exit 2, before anything loads (and by train_head)."""
    import pytest

    from pairkit.errors import UsageError
    from pairkit.train.config import TrainConfig
    from pairkit.train.loop import train_head

    store = random_store(tmp_path / "s", n_sources=20, views=2, dim=12, classes=4)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "--pair-whitening", "100", *FAST])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == ("error: --pair-whitening 100 is more than the head's 8 output "
                                "dims: give 8 or fewer, or all")
    assert not (tmp_path / "h").exists()
    with pytest.raises(UsageError, match="--pair-whitening 13 is more than the head's 12"):
        train_head(store, tmp_path / "h", TrainConfig(relation="instance", pair_whitening=13,
                                                      epochs=1, device="cpu"))
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "--pair-whitening", "8", *FAST])
    assert r.exit_code == 0, r.output


def test_cli_defaults_are_the_config_defaults() -> None:
    """Every ``pairkit train`` option named like a TrainConfig / LossConfig field defaults to
    that field's default, so ``pairkit.api.train_head`` and the CLI train alike."""
    import dataclasses

    import typer

    from pairkit.core.options import parse_all_or_int
    from pairkit.train.config import TrainConfig
    from pairkit.train.losses import LossConfig

    command = typer.main.get_command(app).commands["train"]
    defaults = {p.name: p.default for p in command.params}
    fields = {f.name: getattr(TrainConfig(), f.name) for f in dataclasses.fields(TrainConfig)}
    fields.update({("loss" if f.name == "name" else f.name): getattr(LossConfig(), f.name)
                   for f in dataclasses.fields(LossConfig)})
    defaults["pair_whitening"] = parse_all_or_int(defaults["pair_whitening"], "")
    compared = sorted(set(defaults) & set(fields))
    assert len(compared) >= 25, compared
    for name in compared:
        assert defaults[name] == fields[name], name
    assert TrainConfig().mined_view == "random"


def test_a_collapse_stop_is_a_failure_naming_the_epoch(tmp_path, monkeypatch):
    """Mutation audit 5b (TR2): a run that ``--stop-on-collapse`` stopped must exit 1 with
    the epoch, not end as a success."""
    from types import SimpleNamespace

    import pairkit.train.command as command

    monkeypatch.setattr(command, "train_to_files", lambda *a, **kw: SimpleNamespace(
        records=[{"epoch": 3}], stopped="collapse"))
    r = runner.invoke(app, ["train", str(tmp_path), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "--stop-on-collapse", "-q"])
    assert r.exit_code == 1, r.output
    assert "stopped at epoch 3: the embeddings collapsed (--stop-on-collapse)" in r.stderr


def test_project_keeps_the_image_column_of_a_dataset_store(tmp_path):
    """Found by a bug hunt (2026-12-07): a store embedded from a Hugging Face dataset with
    ``--image-column pic`` lost the column when projected (``project`` drops the input's
    ``embedding`` record, where it is kept), so pair_loader on the projected store's
    pairs read the default pick, the dataset's ``image`` column: other pictures, no
    error."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from pairkit.api import pair_loader
    from pairkit.core.store_writer import write_store

    def png(seed: int) -> bytes:
        pixels = np.random.default_rng(seed).integers(0, 255, (8, 8, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="PNG")
        return out.getvalue()

    n = 24
    (tmp_path / "images").mkdir()
    pq.write_table(pa.table({"image": [png(100 + i) for i in range(n)],
                             "pic": [png(i) for i in range(n)]}),
                   tmp_path / "images" / "t.parquet")
    import pandas as pd

    items = pd.DataFrame({"path": [f"t.parquet/{i:08d}" for i in range(n)],
                          "source": [f"s{i // 2}" for i in range(n)],
                          "view": [i % 2 for i in range(n)]})
    write_store(tmp_path / "s", np.random.default_rng(0).normal(size=(n, 6)).astype(
        np.float32), items, encoder={"name": "x"},
        extra={"image_root": str(tmp_path / "images"),
               "embedding": {"model": "x", "image_column": "pic"}})
    train_and_project(tmp_path)
    p = Store.open(tmp_path / "p")
    assert "embedding" not in p.manifest  # image queries would skip the head
    assert p.manifest["projected"]["image_column"] == "pic"
    table = pd.DataFrame({"store_id": p.content_id, "anchor_id": [0], "positive_id": [1],
                          "negative_id": [5]})
    anchor, positive, negative = next(iter(pair_loader(
        table, p, transform=np.asarray, batch_size=None, shuffle=False)))
    want = np.asarray(Image.open(io.BytesIO(png(0))).convert("RGB"))
    np.testing.assert_array_equal(np.asarray(anchor), want)


def test_project_refuses_a_head_of_another_dim_before_loading_it(tmp_path, monkeypatch):
    """Found by a bug hunt (2026-12-07): the dim check ran only after the head's weights
    were loaded with torch (2 s of imports to say the dims differ, which config.json
    tells): a wrong --head is refused before anything heavy (read_head_config)."""
    random_store(tmp_path / "s", n_sources=10, views=2, dim=12)
    random_store(tmp_path / "t", n_sources=10, views=2, dim=6)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "-q", *FAST])
    assert r.exit_code == 0, r.stderr

    def no_load(path):  # noqa: ANN001, ANN202
        raise AssertionError("the head was loaded")

    monkeypatch.setattr("pairkit.train.head.load_head", no_load)
    r = runner.invoke(app, ["project", str(tmp_path / "t"), "--head", str(tmp_path / "h"),
                            "-o", str(tmp_path / "p")])
    assert r.exit_code == 1, r.output
    assert "head" in r.stderr and "takes vectors of dim 12, store" in r.stderr
    assert not (tmp_path / "p").exists()


def test_a_head_too_large_for_memory_is_one_line_naming_it(tmp_path):
    """Found by a bug hunt (hunt7 2): train --hidden 10**12 (or --out-dim) ended in
    "error: internal error: RuntimeError: [enforce fail at alloc_cpu.cpp:127] ...
    DefaultCPUAllocator: can't allocate memory ... report it": torch's allocator failing
    is a RuntimeError, not a MemoryError. The head that does not fit is named, exit 1,
    no head folder."""
    random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    for args, head in ((["--hidden", str(10**12)], "residual head 8->8 (hidden 10^12)"),
                       (["--head", "linear", "--out-dim", str(10**12)],
                        "linear head 8->10^12")):
        r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                                "--relation", "instance", "--device", "cpu", *args])
        assert r.exit_code == 1, r.stderr
        assert r.stderr.startswith(f"error: a {head.replace('10^12', str(10**12))} of "), \
            r.stderr
        assert "does not fit in memory: lower --hidden or --out-dim" in r.stderr
        assert "internal error" not in r.stderr and len(r.stderr.splitlines()) == 1
        assert not (tmp_path / "h").exists()


def test_project_summary_escapes_control_characters_in_its_paths(tmp_path):
    """Found by a bug hunt: project's summary printed ``-o`` (and the head's path) as
    typed, so a newline or ESC in them made lines of their own or terminal escapes."""
    random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    head = tmp_path / "h\x1b[31m"
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(head),
                            "--relation", "instance", "-q", *FAST])
    assert r.exit_code == 0, r.stderr
    out = tmp_path / "p\nerror: forged"
    r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head", str(head),
                            "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert r.stderr == (f"projected 20 rows 8->8 with head {ascii(str(head))} -> "
                        f"{ascii(str(out))}\n")


def test_a_pair_whitening_too_large_for_memory_is_refused_before_training(tmp_path,
                                                                          monkeypatch):
    """Found by reading the code (2026-12-07): train --head mlp --out-dim 40000 trained
    every epoch, then the default pair whitening built 40,000 x 40,000 float64 matrices
    (about 5 of them at its peak, 64 GB) and ran out of memory: the run was lost. Now
    refused before the first epoch (exit 2, one line, no head folder), naming the option
    and the memory needed against the memory available (8 GiB here, monkeypatched)."""
    import pairkit.core.memory as memory

    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**30)
    random_store(tmp_path / "s", n_sources=20, views=2, dim=8)  # 40 rows: whitened
    base = ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"), "--relation",
            "instance", "--device", "cpu", "--epochs", "1"]
    # 5 x 8 x 40,000^2 bytes = 59.6 GiB; rotated onto 128 dims, 8 matrices: 95.4 GiB
    for args, want in (
            (["--head", "mlp", "--out-dim", "40000"],
             "error: --pair-whitening all (the default) of the head's 40,000 output dims "
             "needs about 59.6 GiB of memory (40,000 x 40,000 matrices) and 8.0 GiB is "
             "available: lower --out-dim, or pass --pair-whitening 0 (none)"),
            (["--head", "linear", "--out-dim", "40000", "--pair-whitening", "128"],
             "error: --pair-whitening 128 of the head's 40,000 output dims needs about "
             "95.4 GiB of memory (40,000 x 40,000 matrices) and 8.0 GiB is available: "
             "lower --out-dim, or pass --pair-whitening 0 (none)")):
        r = runner.invoke(app, [*base, *args])
        assert r.exit_code == 2, r.stderr
        assert r.stderr == want + "\n"
        assert not (tmp_path / "h").exists()
    # without the whitening the same head trains; a small head is not refused either
    r = runner.invoke(app, [*base, "--head", "mlp", "--out-dim", "40000",
                            "--pair-whitening", "0"])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, [*base, "-o", str(tmp_path / "h2"), "--head", "mlp",
                            "--out-dim", "1000"])    # 38 MB
    assert r.exit_code == 0, r.stderr
    # under 32 training rows no whitening is fitted (it centres on their mean): no check
    random_store(tmp_path / "s16", n_sources=8, views=2, dim=8)
    r = runner.invoke(app, ["train", str(tmp_path / "s16"), "-o", str(tmp_path / "h3"),
                            *base[4:], "--head", "mlp", "--out-dim", "40000"])
    assert r.exit_code == 0, r.stderr


def test_an_allocation_failure_in_torch_is_out_of_memory_in_one_line(tmp_path, monkeypatch):
    """Found by reading the code (2026-12-07): torch's CPU allocator failing raises a
    RuntimeError ("DefaultCPUAllocator: can't allocate memory"), which ended in "error:
    internal error: RuntimeError: [enforce fail at alloc_cpu.cpp:127] ... (rerun with
    PAIRKIT_DEBUG=1 ... and report it)"; a torch.OutOfMemoryError of no CUDA allocation
    was called "CUDA out of memory". Now one "out of memory" line, exit 1."""
    import torch

    import pairkit.train.loop as loop

    random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                       "can't allocate memory: you tried to allocate 12884901888 bytes. "
                       "Error code 12 (Cannot allocate memory)")
    for raised, want in (
            (cpu, "error: out of memory: can't allocate 12.0 GiB: try a smaller "
                  "--batch-size or a smaller input"),
            (torch.OutOfMemoryError("out of memory"),
             "error: out of memory: try a smaller --batch-size or a smaller input"),
            (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
             "error: CUDA out of memory: try a smaller --batch-size")):
        def fails(*args, raised=raised, **kwargs):
            raise raised

        monkeypatch.setattr(loop, "train_head", fails)
        r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                                "--relation", "instance", "--device", "cpu"])
        assert r.exit_code == 1, r.stderr
        assert r.stderr == want + "\n"


@pytest.mark.parametrize(("relation", "hint"), [
    ("instance", "(instance needs 2+ views per source: embed --views 2; or use --relation "
                 "label or a pair table)"),
    ("label", "(label needs 2+ items of a label: embed with --labels; or use --relation "
              "instance or a pair table)")])
def test_a_relation_without_positives_is_told_what_it_needs(tmp_path, relation, hint):
    """Five one-view sources of five labels: no positive under either relation. The hint
    was the instance relation's for both, so --relation label was told to 'use --relation
    label'."""
    random_store(tmp_path / "s", n_sources=5, views=1, classes=5)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "--relation", relation,
                            "-o", str(tmp_path / "h"), *FAST])
    assert r.exit_code == 1, r.output
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: --relation {relation}: fewer than 2 items have a positive in the store {hint}")
    assert not (tmp_path / "h").exists()


def test_embed_mine_and_train_summaries_escape_control_characters_in_their_paths(tmp_path):
    """Found by reading the code (2026-12-07): the summaries of embed, mine and train
    printed ``-o`` as typed (project's and import's escape it), so a newline or ESC in a
    path made a line of its own (``error: forged``) or a terminal escape."""
    from tests.conftest import make_images

    make_images(tmp_path / "images", n_per_class=3, classes=2)
    store = tmp_path / "s\x1b[31m"
    r = runner.invoke(app, ["embed", str(tmp_path / "images"), "-o", str(store),
                            "--model", "fake", "--views", "2"])
    assert r.exit_code == 0, r.stderr
    assert r.stderr.splitlines()[-1].endswith(f"-> {ascii(str(store))} (12 rows)"), r.stderr
    pairs = tmp_path / "p\nerror: forged.csv"
    r = runner.invoke(app, ["mine", str(store), "--hard", "-k", "2", "-o", str(pairs)])
    assert r.exit_code == 0, r.stderr
    assert r.stderr.splitlines()[0].endswith(f"-> {ascii(str(pairs))}"), r.stderr
    head = tmp_path / "h\nerror: forged"
    r = runner.invoke(app, ["train", str(store), "--pairs", str(pairs), "-o", str(head),
                            *FAST])
    assert r.exit_code == 0, r.stderr
    assert r.stderr.splitlines()[-1].endswith(f"-> {ascii(str(head))}"), r.stderr
