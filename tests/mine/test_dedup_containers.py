"""dedup on stores embedded from containers: webdataset tar shards (``SHARD.tar/MEMBER``)
and a parquet data file (``FILE.parquet/ROW``, ``embed --image-column``). Their images are
read as ``embed`` read them (:func:`pairkit.encode.item_images.item_image`): the keep
rules that read images and the pixel check decide as on the same images in a folder."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.encode.test_webdataset import write_shards
from tests.mine.test_near_duplicate_pixels import planted_folder, texture

runner = CliRunner()


def embed(src: Path, out: Path, *extra: str) -> None:
    r = runner.invoke(app, ["embed", str(src), "-o", str(out), "--model", "pixels", "-q",
                            *extra])
    assert r.exit_code == 0, r.output


def dedup(store: Path, *args: str) -> tuple[pd.DataFrame, str]:
    r = runner.invoke(app, ["dedup", str(store), *args])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    return pd.DataFrame(rows), r.stderr


def copies(root: Path) -> list[Path]:
    """Three textures, each as a shrunk JPEG copy (``kN.jpg``: the shortest path and the
    lowest id of its group) and its original (``kN_original.png``: more pixels, lossless),
    in that order. Only a rule that reads the images keeps the originals."""
    root.mkdir(parents=True)
    files = []
    for k in range(3):
        grey = (texture(200 + k, 64, smooth=0.7) * 255).astype(np.uint8)  # detailed
        img = Image.fromarray(grey).convert("RGB")
        img.resize((40, 40), Image.Resampling.BILINEAR).save(root / f"k{k}.jpg", quality=60)
        img.save(root / f"k{k}_original.png")
        files += [root / f"k{k}.jpg", root / f"k{k}_original.png"]
    return files


def dataset(path: Path, files: list[Path]) -> None:
    """``files`` as rows of a parquet file's ``pixels`` column, beside a ``decoy`` column of
    the same images in the other order within each pair (read by mistake, it would keep
    the other row)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    decoy = [files[i ^ 1].read_bytes() for i in range(len(files))]
    pq.write_table(pa.table({"pixels": [f.read_bytes() for f in files], "decoy": decoy}),
                   path)


def kept(table: pd.DataFrame) -> list[str]:
    return table.loc[table["keep"], "path"].tolist()


def test_keep_largest_and_best_read_tar_members(tmp_path: Path) -> None:
    files = copies(tmp_path / "img")
    write_shards(tmp_path / "wds", files, per_shard=4)
    embed(tmp_path / "wds" / "{00000..00001}.tar", tmp_path / "store")
    embed(tmp_path / "img", tmp_path / "folder")
    want = [f"0000{k // 2}.tar/img_k{k}_original.png" for k in range(3)]
    for rule in ("largest", "best"):
        table, err = dedup(tmp_path / "store", "-t", "0.9", "--method", "threshold",
                           "--keep", rule)
        assert "unreadable" not in err, err
        assert kept(table) == want, (rule, table)
        folder, _ = dedup(tmp_path / "folder", "-t", "0.9", "--method", "threshold",
                          "--keep", rule)  # the same images as files: the same choice
        assert kept(folder) == [f"k{k}_original.png" for k in range(3)]
        assert table["keep_reason"].tolist() == folder["keep_reason"].tolist()
    table, _ = dedup(tmp_path / "store", "-t", "0.9", "--method", "threshold", "--keep",
                     "largest")
    assert set(table.loc[table["keep"], "keep_reason"]) == {"largest image (most pixels)"}


def test_keep_largest_and_best_read_the_image_column_of_a_dataset(tmp_path: Path) -> None:
    files = copies(tmp_path / "img")
    dataset(tmp_path / "data.parquet", files)
    embed(tmp_path / "data.parquet", tmp_path / "store", "--image-column", "pixels")
    want = [f"data.parquet/{2 * k + 1:08d}" for k in range(3)]  # the originals' rows
    for rule in ("largest", "best"):
        table, err = dedup(tmp_path / "store", "-t", "0.9", "--method", "threshold",
                           "--keep", rule)
        assert "unreadable" not in err, err
        assert kept(table) == want, (rule, table)


def test_the_pixel_check_reads_containers_as_it_reads_a_folder(tmp_path: Path) -> None:
    """The planted copies of one folder embedded three ways: as a folder, as tar shards
    and as a parquet file's image column; ``dedup --method auto`` runs the pixel check on
    each and finds the same groups."""
    paths, truth = planted_folder(tmp_path / "img")
    files = [tmp_path / "img" / p for p in paths]
    order = sorted(files)  # embed's order: the folder's by path, the dataset's by row
    write_shards(tmp_path / "wds", order, per_shard=20)
    dataset(tmp_path / "data.parquet", order)
    embed(tmp_path / "img", tmp_path / "folder")
    embed(tmp_path / "wds" / "{00000..00001}.tar", tmp_path / "tar")
    embed(tmp_path / "data.parquet", tmp_path / "rows", "--image-column", "pixels")

    def groups(store: str, name: dict[str, str]) -> set[frozenset[str]]:
        table, err = dedup(tmp_path / store, "--keep", "first")
        assert "pixels, aligned correlation" in err, err
        return {frozenset(name[p] for p in g["path"]) for _, g in table.groupby("group")}

    want = {frozenset(paths[i] for i in pair) for pair in truth}
    assert groups("folder", {p: p for p in paths}) == want
    assert groups("tar", {f"{k // 20:05d}.tar/img_{f.name}": f.name
                          for k, f in enumerate(order)}) == want
    assert groups("rows", {f"data.parquet/{k:08d}": f.name
                           for k, f in enumerate(order)}) == want
    # mine's near-duplicate rule decides as dedup does, reading the store's image column
    from pairkit.core.store import Store
    from pairkit.encode.item_images import image_column_of
    from pairkit.mine.false_negatives import FalseNegativeConfig, build_context
    from pairkit.mine.fn_context import near_duplicate_group_ids

    st = Store.open(tmp_path / "rows")
    cfg = FalseNegativeConfig(rules=("near-duplicate",), near_duplicate_method="pixels")
    ctx = build_context(st.vectors(np.float32), None, np.arange(st.count), cfg,
                        paths=st.items["path"].to_numpy(dtype=object),
                        image_root=st.manifest["image_root"], image_column=image_column_of(st))
    found = near_duplicate_group_ids(ctx, cfg)
    assert {frozenset(order[i].name for i in np.flatnonzero(found == g))
            for g in set(found.tolist()) - {-1}} == want


def test_item_image_gives_a_file_or_the_bytes(tmp_path: Path) -> None:
    from pairkit.encode.item_images import item_image

    files = copies(tmp_path / "img")
    write_shards(tmp_path / "wds", files[:2], per_shard=2)
    dataset(tmp_path / "data.parquet", files[:2])
    plain = item_image(tmp_path, "img/k0.jpg")
    assert plain == (files[0], files[0].stat().st_size)  # the file itself: nothing read
    member = item_image(tmp_path, "wds/00000.tar/img_k0_original.png")
    assert isinstance(member[0], io.BytesIO) and member[0].getvalue() == files[1].read_bytes()
    assert member[1] == files[1].stat().st_size
    row = item_image(tmp_path, "data.parquet/00000001", image_column="decoy")
    assert row[0].getvalue() == files[0].read_bytes()
    assert item_image(tmp_path, "data.parquet/00000001") is None  # two binary columns
    assert item_image(tmp_path, "wds/00000.tar/nope.png") is None
    assert item_image(tmp_path, "img/gone.png") is None
    assert item_image(tmp_path, "../img/k0.jpg") is None  # outside the root: never opened
    assert item_image(tmp_path, "wds/00000.tar/img_k0_original.png", max_bytes=10) is None
