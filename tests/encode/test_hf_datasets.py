"""embed of Hugging Face datasets: save_to_disk folders, parquet and Arrow files with image
bytes or paths give the store the same images in a folder give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from tests.conftest import make_images

datasets = pytest.importorskip("datasets")
runner = CliRunner()


def embed(src: Path, out: Path, *extra: str):  # noqa: ANN201
    return runner.invoke(app, ["embed", str(src), "-o", str(out), "--model", "fake", "-q",
                               *extra])


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf") / "images"
    make_images(root, n_per_class=3, classes=2)
    return root


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _dataset(folder: Path, bytes_: bool = True) -> object:
    files = _files(folder)
    names = sorted({p.parent.name for p in files})
    image = [{"bytes": p.read_bytes(), "path": None} if bytes_ else
             {"bytes": None, "path": str(p)} for p in files]
    return datasets.Dataset.from_dict(
        {"image": image, "label": [names.index(p.parent.name) for p in files]},
        features=datasets.Features({"image": datasets.Image(),
                                    "label": datasets.ClassLabel(names=names)}))


def _by_sha(st: Store) -> dict[str, np.ndarray]:
    v = st.vectors()
    return {sha: v[i] for i, sha in enumerate(st.items["file_sha256"])}


@pytest.fixture(scope="module")
def folder_store(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Store:
    out = tmp_path_factory.mktemp("fs") / "s"
    assert embed(folder, out, "--labels", "folder").exit_code == 0
    return Store.open(out)


@pytest.mark.parametrize("kind", ["save_to_disk", "parquet", "arrow", "dataset_dict"])
def test_same_store_as_the_folder(kind: str, folder: Path, folder_store: Store,
                                  tmp_path: Path) -> None:
    ds = _dataset(folder)
    if kind == "save_to_disk":
        ds.save_to_disk(str(tmp_path / "ds"))
        src = tmp_path / "ds"
    elif kind == "parquet":
        ds.to_parquet(str(tmp_path / "d.parquet"))
        src = tmp_path / "d.parquet"
    elif kind == "arrow":
        ds.save_to_disk(str(tmp_path / "ds"))
        src = next((tmp_path / "ds").glob("*.arrow"))
    else:
        datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "dd"))
        src = tmp_path / "dd"
    r = embed(src, tmp_path / "s")
    assert r.exit_code == 0, r.output
    st = Store.open(tmp_path / "s")
    assert st.count == folder_store.count and st.manifest["labels"] == "dataset"
    # the same vectors, in the same order (rows in file order = the folder's sorted paths);
    # augmented views (--views 2..) are seeded by the store path, so only view 0 is shared
    np.testing.assert_array_equal(st.vectors(), folder_store.vectors())
    assert st.items["file_sha256"].tolist() == folder_store.items["file_sha256"].tolist()
    assert st.items["label"].tolist() == folder_store.items["label"].tolist()  # names used
    assert all(p.split("/")[-1].isdigit() and len(p.split("/")[-1]) == 8
               for p in st.items["path"])
    # each row's image reads back from its store path
    from pairkit.encode.item_images import read_item_bytes

    files = _files(folder)
    for i in (0, 4, len(st.items) - 1):
        path = st.items["path"][i]
        assert read_item_bytes(st.manifest["image_root"], path) == files[i].read_bytes()
    # a rerun embeds nothing
    again = runner.invoke(app, ["embed", str(src), "-o", str(tmp_path / "s"), "--model",
                                "fake"])
    assert "nothing to embed: all 6 images are already" in again.output


def test_a_column_of_paths_gives_the_folder_paths(folder: Path, folder_store: Store,
                                                 tmp_path: Path) -> None:
    _dataset(folder, bytes_=False).to_parquet(str(folder / ".." / "paths.parquet"))
    r = embed(folder / ".." / "paths.parquet", tmp_path / "s")
    assert r.exit_code == 0, r.output
    st = Store.open(tmp_path / "s")
    assert Path(st.manifest["image_root"]) == folder.parent.resolve()
    assert st.items["path"].tolist() == ["images/" + p for p in folder_store.items["path"]]
    np.testing.assert_array_equal(st.vectors(), folder_store.vectors())


def test_plain_binary_column_and_named_columns(folder: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = _files(folder)
    table = pa.table({"pixels": [p.read_bytes() for p in files],
                      "cls": [p.parent.name for p in files],
                      "other": [b"x"] * len(files)})
    pq.write_table(table, tmp_path / "t.parquet")
    r = embed(tmp_path / "t.parquet", tmp_path / "s")
    assert r.exit_code == 2 and "--image-column" in r.output  # two binary columns
    r = embed(tmp_path / "t.parquet", tmp_path / "s", "--image-column", "pixels",
              "--label-column", "cls")
    assert r.exit_code == 0, r.output
    st = Store.open(tmp_path / "s")
    assert st.items["label"].tolist() == [p.parent.name for p in files]
    assert st.manifest["embedding"]["image_column"] == "pixels"
    from pairkit.encode.item_images import image_column_of, read_item_bytes
    from pairkit.errors import PairkitError

    root, first = st.manifest["image_root"], st.items["path"][0]
    assert read_item_bytes(root, first, image_column=image_column_of(st)) == \
        files[0].read_bytes()
    with pytest.raises(PairkitError, match="--image-column"):
        read_item_bytes(root, first)  # two binary columns: the store's column is needed
    bad = embed(tmp_path / "t.parquet", tmp_path / "s2", "--image-column", "nope")
    assert bad.exit_code == 2 and "--image-column nope: no such column" in bad.output


def test_broken_and_missing_rows_are_skipped_and_listed(folder: Path, tmp_path: Path) -> None:
    files = _files(folder)
    image = [{"bytes": p.read_bytes(), "path": None} for p in files[:3]]
    image += [{"bytes": b"not an image", "path": None}, None]
    ds = datasets.Dataset.from_dict({"image": image},
                                    features=datasets.Features({"image": datasets.Image()}))
    ds.save_to_disk(str(tmp_path / "ds"))
    r = runner.invoke(app, ["embed", str(tmp_path / "ds"), "-o", str(tmp_path / "s"),
                            "--model", "fake"])
    assert r.exit_code == 0, r.output
    assert "embedded 3 images" in r.output and "skipped 2" in r.output
    errors = Store.open(tmp_path / "s").read_errors()
    reasons = {e["path"].rsplit("/", 1)[-1]: e["reason"] for e in errors}
    assert reasons["00000004"] == "no image in column image"
    assert "00000003" in reasons


def test_dataset_options_are_checked(folder: Path, tmp_path: Path) -> None:
    r = embed(folder, tmp_path / "s", "--image-column", "image")
    assert r.exit_code == 2 and "need a Hugging Face dataset" in r.output
    _dataset(folder).save_to_disk(str(tmp_path / "ds"))
    r = embed(tmp_path / "ds", tmp_path / "s", "--labels", "folder")
    assert r.exit_code == 2 and "--label-column" in r.output
    r = embed(tmp_path / "missing.parquet", tmp_path / "s")
    assert r.exit_code == 1 and "not found" in r.output


@pytest.mark.parametrize("name", ["bad.parquet", "bad.arrow", "cut.parquet", "cut.arrow"])
def test_a_corrupt_data_file_is_one_line(folder: Path, tmp_path: Path, name: str) -> None:
    """Found by a bug hunt (2026-12-06): a .parquet / .arrow input that is not one (or a
    truncated one) was an "internal error" asking for a bug report; it is now one line
    naming the file, exit 1, and nothing is written."""
    path = tmp_path / name
    if name.startswith("bad"):
        path.write_text("garbage")
    else:
        good = tmp_path / ("good" + path.suffix)
        ds = _dataset(folder)
        if path.suffix == ".parquet":
            ds.to_parquet(str(good))
        else:
            ds.save_to_disk(str(tmp_path / "saved"))
            good = next((tmp_path / "saved").glob("*.arrow"))
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    result = embed(path, tmp_path / "s")
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "internal error" not in result.output and name in result.output
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("marker", ["dataset_info.json", "state.json", "dataset_dict.json"])
def test_an_image_folder_with_a_stray_marker_is_a_folder(folder: Path, tmp_path: Path,
                                                         marker: str) -> None:
    """Found by a bug hunt (2026-12-06): a folder of images holding a metadata file named
    like a ``save_to_disk`` marker was taken for a dataset ("has no data files") and could
    not be embedded; a dataset folder now needs its Arrow files too."""
    import shutil

    from pairkit.encode.hf_datasets import is_hf_dataset

    photos = tmp_path / "photos"
    shutil.copytree(folder, photos)
    (photos / marker).write_text("{}")
    assert not is_hf_dataset(photos)
    result = embed(photos, tmp_path / "s", "--labels", "folder")
    assert result.exit_code == 0, result.output
    assert Store.open(tmp_path / "s").count == 6
    saved = tmp_path / "saved"
    _dataset(folder).save_to_disk(str(saved))
    assert is_hf_dataset(saved)


def test_a_row_naming_a_missing_file_says_so(folder: Path, tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): a dataset row naming an image file that never
    existed was logged as "file vanished during the run"."""
    import pandas as pd

    paths = [str(p) for p in _files(folder)[:2]] + [str(tmp_path / "missing.jpg")]
    pd.DataFrame({"image": paths}).to_parquet(tmp_path / "d.parquet")
    result = embed(tmp_path / "d.parquet", tmp_path / "s")
    assert result.exit_code == 0, result.output
    errors = Store.open(tmp_path / "s").read_errors()
    assert len(errors) == 1 and "vanished" not in errors[0]["reason"]
    assert "missing.jpg" in errors[0]["reason"] and "does not exist" in errors[0]["reason"]


def test_class_label_numbers_out_of_its_names(folder: Path, tmp_path: Path) -> None:
    """A ClassLabel column's -1 is no label; a number past its names is kept as the
    number it is (a file written by another tool), never an IndexError; the others
    are their names (hunt 3b: -1 read as the label "-1", which made every unlabelled
    row one class, and an off-by-one bound, both survived)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pairkit.encode.hf_datasets import discover_hf_dataset

    files = _files(folder)[:4]
    data = datasets.Dataset.from_dict(
        {"image": [{"bytes": p.read_bytes(), "path": None} for p in files],
         "label": [0, 1, -1, 0]},
        features=datasets.Features({"image": datasets.Image(),
                                    "label": datasets.ClassLabel(names=["cat", "dog"])}))
    data.to_parquet(str(tmp_path / "d.parquet"))
    table = pq.read_table(tmp_path / "d.parquet")
    at = table.schema.get_field_index("label")
    table = table.set_column(at, table.schema.field(at), pa.array([0, 1, -1, 2], pa.int64()))
    assert b"huggingface" in table.schema.metadata
    pq.write_table(table, tmp_path / "d.parquet")
    _, found, problems, labels = discover_hf_dataset(tmp_path / "d.parquet")
    assert not problems and len(found) == 4
    assert [labels[f.path] for f in found] == ["cat", "dog", None, "2"]
