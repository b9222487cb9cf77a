"""``pairkit dedup STORE --against OTHER``: planted train/test copies are found."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.mine.near_duplicate_copies import edited_copy
from tests.mine.test_near_duplicate_pixels import texture

runner = CliRunner()


def test_against_finds_planted_train_test_copies(tmp_path: Path) -> None:
    train, test = tmp_path / "train", tmp_path / "test"
    train.mkdir()
    test.mkdir()
    rng = np.random.default_rng(0)
    for i in range(16):
        Image.fromarray((texture(200 + i, 64) * 255).astype(np.uint8)).convert("RGB").save(
            train / f"tr{i:02d}.png")
    for i in range(12):
        Image.fromarray((texture(400 + i, 64) * 255).astype(np.uint8)).convert("RGB").save(
            test / f"te{i:02d}.png")
    leaks = {"te-copy0.png": "tr00.png", "te-copy1.png": "tr03.png",
             "te-copy2.png": "tr07.png"}
    for k, (name, src) in enumerate(leaks.items()):
        img = Image.open(train / src).convert("RGB")
        edited_copy(img, ("shift", "reencode", "brightness")[k], rng).save(test / name)
    shutil.copy(train / "tr10.png", test / "te-exact.png")
    leaks["te-exact.png"] = "tr10.png"
    for folder in (train, test):
        r = runner.invoke(app, ["embed", str(folder), "-o", str(folder) + "-store", "--model",
                                "pixels", "-q"])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["dedup", str(test) + "-store", "--against", str(train) + "-store"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert {row["path"]: row["other_path"] for row in rows} == leaks
    assert {row["path"]: row["match"] for row in rows}["te-exact.png"] == "exact"
    # a near copy's similarity is its stored vectors' cosine (the byte copy's is 1)
    from pairkit.core.store import Store

    va = Store.open(str(test) + "-store").vectors(np.float32)
    vb = Store.open(str(train) + "-store").vectors(np.float32)
    near = [row for row in rows if row["match"] == "near"]
    assert len(near) == 3
    for row in near:
        want = float(va[row["id"]] @ vb[row["other_id"]])
        assert want < 0.9999 and abs(row["similarity"] - want) < 1e-5
    assert "4 of 16 sources duplicate one of the other store's 16" in r.stderr
    # exact only: the byte copy alone
    r = runner.invoke(app, ["dedup", str(test) + "-store", "--against", str(train) + "-store",
                            "--exact-only", "--paths-only"])
    assert r.exit_code == 0, r.output
    assert r.stdout.split() == ["te-exact.png"]
    r = runner.invoke(app, ["dedup", str(test) + "-store", "--against", str(train) + "-store",
                            "--drop"])
    assert r.exit_code == 2 and "--drop does not apply to --against" in r.output


def test_against_refuses_to_list_a_path_that_leaves_the_image_root(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): plain ``dedup`` refuses to list a hand-edited
    store's ``../`` path (``--paths-only | xargs rm`` would act on it), but ``--against``
    printed it unless ``--absolute`` was given. Either store's path is checked."""
    import pandas as pd

    from pairkit.core.store_writer import write_store

    root = {"image_root": str(tmp_path / "img")}
    for name, bad in (("test", "../../../../etc/shadow"), ("train", "ok2.jpg")):
        write_store(tmp_path / name, np.array([[1.0, 0], [0, 1.0]], np.float32),
                    pd.DataFrame({"path": [bad, f"{name}-ok.jpg"]}), dtype="float32",
                    extra=root)
    for extra in ([], ["--paths-only"], ["--paths-only", "-0"]):
        r = runner.invoke(app, ["dedup", str(tmp_path / "test"), "--against",
                                str(tmp_path / "train"), *extra])
        assert r.exit_code == 1, (extra, r.output)
        assert r.stdout == "" and "refusing to list it" in r.stderr, (extra, r.output)


def test_against_table_has_the_documented_types_even_when_empty(tmp_path: Path) -> None:
    """Found by a bug hunt (hunt-l 11): dedup.md says ``similarity`` is float32, the file
    held float64; and an empty result's parquet had every column of type null (an empty
    groups table keeps its types)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pairkit.core.store_writer import write_store

    write_store(tmp_path / "test", np.array([[1.0, 0], [0, 1.0]], np.float32),
                pd.DataFrame({"path": ["a.jpg", "b.jpg"]}), dtype="float32")
    for name, row in (("train", [1.0, 0]), ("far", [0.6, 0.8])):
        write_store(tmp_path / name, np.array([row], np.float32),
                    pd.DataFrame({"path": [f"{name}.jpg"]}), dtype="float32")
    for other, rows in (("train", 1), ("far", 0)):
        out = tmp_path / f"{other}.parquet"
        r = runner.invoke(app, ["dedup", str(tmp_path / "test"), "--against",
                                str(tmp_path / other), "--method", "threshold", "-t", "0.99",
                                "-o", str(out), "-q"])
        assert r.exit_code == 0, r.output
        table = pq.read_table(out)
        assert table.num_rows == rows
        types = {f.name: f.type for f in table.schema}
        assert types["id"] == pa.int64() and types["other_id"] == pa.int64(), types
        assert types["similarity"] == pa.float32(), types
        for col in ("path", "other_path", "match"):
            assert pa.types.is_string(types[col]) or pa.types.is_large_string(types[col]), types


def test_against_counts_sources_not_rows_of_a_store_with_views(tmp_path: Path) -> None:
    """The summary's "of N sources" are sources: a store of 2 views each has twice the rows."""
    train, test = tmp_path / "train", tmp_path / "test"
    train.mkdir()
    test.mkdir()
    for i in range(6):
        Image.fromarray((texture(200 + i, 64) * 255).astype(np.uint8)).convert("RGB").save(
            train / f"tr{i:02d}.png")
    for i in range(5):
        Image.fromarray((texture(400 + i, 64) * 255).astype(np.uint8)).convert("RGB").save(
            test / f"te{i:02d}.png")
    shutil.copy(train / "tr02.png", test / "te-exact.png")
    for folder in (train, test):
        r = runner.invoke(app, ["embed", str(folder), "-o", str(folder) + "-store", "--model",
                                "pixels", "--views", "2", "-q"])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["dedup", str(test) + "-store", "--against", str(train) + "-store"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert {row["path"] for row in rows} == {"te-exact.png"}
    assert "1 of 6 sources duplicate one of the other store's 6" in r.stderr, r.stderr
