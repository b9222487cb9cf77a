"""`pairkit dedup`: table output, paths for pipelines, keep rules, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store_writer import write_store

runner = CliRunner()


def dup_store(tmp_path: Path, image_root: Path | None = None) -> Path:
    """A store of 6 sources x 2 views with known duplicates (see the asserts below).

    Sources (view 0 vectors): a, b = a's near copy (cos 0.98), c = a byte copy of d
    (same file_sha256), d, e and f far from everything. View 1 of e equals a.
    """
    e = np.eye(8, dtype=np.float32)
    near_a = np.float32(0.98) * e[0] + np.float32(np.sqrt(1 - 0.98**2)) * e[7]
    view0 = {"a.jpg": e[0], "b.jpg": near_a, "c.jpg": e[2], "d.jpg": e[2],
             "e.jpg": e[4], "f.jpg": e[5]}
    sha = {"a.jpg": "1", "b.jpg": "2", "c.jpg": "3", "d.jpg": "3", "e.jpg": "4", "f.jpg": None}
    rows, items = [], []
    for view in (0, 1):
        for name, vec in view0.items():
            v = e[0] if (view == 1 and name == "e.jpg") else vec
            if view == 1 and name != "e.jpg":
                v = vec + 0.05 * e[6]
            rows.append(v)
            items.append({"path": f"img/{name}", "source": f"img/{name}", "view": view,
                          "file_sha256": sha[name]})
    extra = {"image_root": str(image_root)} if image_root else None
    store = tmp_path / "store"
    write_store(store, np.stack(rows), pd.DataFrame(items), encoder={"name": "test"},
                dtype="float32", extra=extra)
    return store


def jsonl(text: str) -> pd.DataFrame:
    return pd.DataFrame([json.loads(line) for line in text.splitlines() if line.strip()])


def test_table_on_stdout_by_default(tmp_path: Path) -> None:
    store = dup_store(tmp_path)
    r = runner.invoke(app, ["dedup", str(store), "--threshold", "0.9"])
    assert r.exit_code == 0, r.output
    t = jsonl(r.stdout)
    assert list(t.columns) == ["group", "id", "path", "keep", "similarity", "match",
                               "keep_reason"]
    assert t["path"].tolist() == ["img/a.jpg", "img/b.jpg", "img/c.jpg", "img/d.jpg"]
    assert t["group"].tolist() == [0, 0, 1, 1]
    assert t["keep"].tolist() == [True, False, True, False]
    assert t["match"].tolist() == ["keep", "near", "keep", "exact"]
    assert t["id"].tolist() == [0, 1, 2, 3]  # view-0 rows
    assert t["similarity"].tolist() == pytest.approx([1.0, 0.98, 1.0, 1.0], abs=1e-6)
    assert "2 groups: 4 of 6 sources in groups (8 items with views), 66.7% of the store" \
        in r.stderr
    assert "2 to drop (1 exact, 1 near copies)" in r.stderr


def test_default_threshold_and_exact_only(tmp_path: Path) -> None:
    store = dup_store(tmp_path)
    r = runner.invoke(app, ["dedup", str(store), "-q"])  # 0.98 >= default 0.965
    assert r.exit_code == 0 and r.stderr == ""
    assert len(jsonl(r.stdout)) == 4
    r = runner.invoke(app, ["dedup", str(store), "--threshold", "0.99"])
    assert jsonl(r.stdout)["path"].tolist() == ["img/c.jpg", "img/d.jpg"]
    r = runner.invoke(app, ["dedup", str(store), "--exact-only"])
    assert jsonl(r.stdout)["path"].tolist() == ["img/c.jpg", "img/d.jpg"]
    assert "exact only" in r.stderr


def test_help_states_the_measured_default() -> None:
    from pairkit.cli.dedup import DEFAULT_THRESHOLD_TEXT
    from pairkit.mine.near_duplicates import DEFAULT_THRESHOLD

    assert float(DEFAULT_THRESHOLD_TEXT) == DEFAULT_THRESHOLD


@pytest.mark.parametrize("name", ["groups.csv", "groups.parquet", "groups.jsonl"])
def test_table_file_and_force(tmp_path: Path, name: str) -> None:
    from pairkit.core.tables import read_table

    store = dup_store(tmp_path)
    out = tmp_path / name
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "-o", str(out)])
    assert r.exit_code == 0 and r.stdout == ""
    t = read_table(out)
    assert t["path"].tolist() == ["img/a.jpg", "img/b.jpg", "img/c.jpg", "img/d.jpg"]
    r = runner.invoke(app, ["dedup", str(store), "-o", str(out)])
    assert r.exit_code == 1
    assert "exists; pass --force to overwrite it" in r.stderr
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.99", "-o", str(out), "--force"])
    assert r.exit_code == 0
    assert len(read_table(out)) == 2


def test_paths_only_drop(tmp_path: Path) -> None:
    root = tmp_path / "images"
    store = dup_store(tmp_path, image_root=root)
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--paths-only", "--drop", "-q"])
    assert r.exit_code == 0
    assert r.stdout == "img/b.jpg\nimg/d.jpg\n"
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--paths-only", "-q"])
    assert r.stdout.splitlines() == ["img/a.jpg", "img/b.jpg", "img/c.jpg", "img/d.jpg"]
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--paths-only", "--drop",
                            "--absolute", "--print0", "-q"])
    assert r.stdout == f"{root / 'img/b.jpg'}\0{root / 'img/d.jpg'}\0"
    out = tmp_path / "drop.txt"
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--paths-only", "--drop",
                            "-o", str(out)])
    assert r.exit_code == 0 and out.read_text() == "img/b.jpg\nimg/d.jpg\n"
    # --drop on the table: only the rows to remove
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--drop", "-q"])
    assert jsonl(r.stdout)["keep"].tolist() == [False, False]


def test_paths_that_leave_the_image_root_are_never_listed(tmp_path: Path) -> None:
    """Issue 20.7: a hand-edited store's `../../etc/shadow` came out of --paths-only (the
    docs pipe that into `xargs rm --`)."""
    from pairkit.core.store import Store

    root = tmp_path / "images"
    store = dup_store(tmp_path, image_root=root)
    items = Store.open(store).items
    items.loc[items["path"] == "img/d.jpg", "path"] = "../../../../etc/shadow"
    vectors = Store.open(store).vectors()
    shutil.rmtree(store)
    write_store(store, vectors, items.drop(columns="id"), encoder={"name": "test"},
                dtype="float32", extra={"image_root": str(root)})
    for args in (["--paths-only", "--drop"], ["--paths-only"], [], ["-o", "g.csv"]):
        r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", *args])
        assert r.exit_code == 1, r.output
        assert r.stdout == "" and "shadow" not in r.stdout
        assert "path '../../../../etc/shadow' holds '..'" in r.output
        assert not (tmp_path / "g.csv").exists()


def test_output_inside_the_store_is_refused(tmp_path: Path) -> None:
    store = dup_store(tmp_path)
    before = (store / "manifest.json").read_bytes()
    r = runner.invoke(app, ["dedup", str(store), "-o", str(store / "manifest.json"),
                            "--force", "--paths-only"])
    assert r.exit_code == 2 and "is inside the input" in r.output
    assert (store / "manifest.json").read_bytes() == before


def test_paths_only_to_a_folder_is_refused_before_the_work(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-08): ``--paths-only -o DIR/`` with no DIR wrote a plain
    file named DIR (the slash dropped); an existing DIR was refused. A path ending in / is a
    folder either way: refused by name, exit 2, before the search, nothing written."""
    store = dup_store(tmp_path)
    (tmp_path / "there").mkdir()
    for name in ("new", "there"):
        out = f"{tmp_path / name}/"
        r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--paths-only", "-o", out])
        assert r.exit_code == 2, r.output
        assert r.stderr == (f"error: output {out} ends in /, a folder: --paths-only writes "
                            "a text file; give a file name (paths.txt)\n")
        assert "groups" not in r.output  # the summary of a finished search
    assert not (tmp_path / "new").exists() and not any((tmp_path / "there").iterdir())


def test_keep_largest_reads_image_sizes(tmp_path: Path) -> None:
    from PIL import Image

    root = tmp_path / "images"
    (root / "img").mkdir(parents=True)
    for name, side in [("a", 10), ("b", 30), ("c", 12), ("d", 12), ("e", 5), ("f", 5)]:
        Image.new("RGB", (side, side), (200, 10, 10)).save(root / "img" / f"{name}.jpg")
    store = dup_store(tmp_path, image_root=root)
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--keep", "largest"])
    assert r.exit_code == 0, r.output
    t = jsonl(r.stdout)
    assert t.loc[t["keep"], "path"].tolist() == ["img/b.jpg", "img/c.jpg"]  # c/d tie: first
    assert "keep largest" in r.stderr
    shutil.rmtree(root / "img")
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--keep", "largest"])
    assert r.exit_code == 0
    assert "unreadable under" in r.stderr and "keep first" in r.stderr
    assert jsonl(r.stdout).loc[lambda t: t["keep"], "path"].tolist() == ["img/a.jpg",
                                                                         "img/c.jpg"]


def test_keep_best_is_the_default(tmp_path: Path) -> None:
    """best: the copy with more detail (here: more pixels; a flat image has none), then the
    largest file, then the shortest path, then path order."""
    from PIL import Image

    root = tmp_path / "images"
    (root / "img").mkdir(parents=True)
    # a/b: b has more pixels. c/d: same pixels, d is the larger file (noise compresses worse)
    Image.new("RGB", (10, 10), (200, 10, 10)).save(root / "img" / "a.jpg")
    Image.new("RGB", (30, 30), (200, 10, 10)).save(root / "img" / "b.jpg")
    Image.new("RGB", (12, 12), (9, 9, 9)).save(root / "img" / "c.jpg")
    noise = np.random.default_rng(0).integers(0, 255, (12, 12, 3), dtype=np.uint8)
    Image.fromarray(noise).save(root / "img" / "d.jpg", quality=95)
    assert (root / "img" / "d.jpg").stat().st_size > (root / "img" / "c.jpg").stat().st_size
    store = dup_store(tmp_path, image_root=root)
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9"])
    assert r.exit_code == 0, r.output
    t = jsonl(r.stdout)
    assert t.loc[t["keep"], "path"].tolist() == ["img/b.jpg", "img/d.jpg"]
    assert "keep best" in r.stderr
    # an unreadable image ranks below every readable copy
    (root / "img" / "b.jpg").write_bytes(b"not an image")
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9"])
    t = jsonl(r.stdout)
    assert t.loc[t["keep"], "path"].tolist() == ["img/a.jpg", "img/d.jpg"]
    assert "1 images unreadable" in r.stderr or "unreadable under" in r.stderr


def test_keep_best_keeps_the_original_of_a_degraded_copy(tmp_path: Path) -> None:
    """Issue 20.9a: a digit resized to 56 px and back, saved as PNG, was kept over its
    original (same pixels, larger file). Each planted copy of one original: the original
    is kept, and keep_reason names the signal that decided against the runner-up."""
    from PIL import Image, ImageEnhance, ImageFilter
    from sklearn.datasets import load_digits

    from pairkit.demo import digit_image

    root = tmp_path / "images"
    (root / "img").mkdir(parents=True)
    original = digit_image(load_digits().images[3], 64, np.random.default_rng(0))
    original.save(root / "img" / "a.png")
    copies = {
        "b.png": original.resize((56, 56), Image.Resampling.BILINEAR).resize((64, 64)),
        "c.jpg": original,  # re-encoded at quality 60
        "d.png": original.filter(ImageFilter.GaussianBlur(0.8)),
        "e.png": original.resize((96, 96), Image.Resampling.BICUBIC),
        "f.png": ImageEnhance.Brightness(original).enhance(1.15),
    }
    for name, img in copies.items():
        img.save(root / "img" / name, **({"quality": 60} if name.endswith(".jpg") else {}))
    assert (root / "img" / "b.png").stat().st_size > (root / "img" / "a.png").stat().st_size
    e = np.eye(8, dtype=np.float32)
    items = pd.DataFrame({"path": [f"img/{n}" for n in ["a.png", *copies]]})
    rows = np.stack([e[0]] * len(items))
    rows[1:] += 0.01 * e[1:len(items)]  # near copies, not exact ones
    store = tmp_path / "store"
    write_store(store, rows, items, encoder={"name": "test"}, dtype="float32",
                extra={"image_root": str(root)})
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.99"])
    assert r.exit_code == 0, r.output
    t = jsonl(r.stdout)
    assert t.loc[t["keep"], "path"].tolist() == ["img/a.png"]
    assert t["keep_reason"].isna().sum() == len(copies)
    from pairkit.mine.keep_best import copy_facts, keep_reason

    a = copy_facts(root / "img" / "a.png")  # the original against each copy alone
    reasons = {name: keep_reason(a, copy_facts(root / "img" / name)) for name in copies}
    assert reasons == {"b.png": "sharper", "c.jpg": "lossless", "d.png": "sharper",
                       "e.png": "sharper", "f.png": "fewer clipped pixels"}
    assert t.loc[t["keep"], "keep_reason"].tolist()[0] in reasons.values()


def test_keep_reason_of_the_other_rules(tmp_path: Path) -> None:
    store = dup_store(tmp_path)
    for rule, reason in [("first", "lowest id"), ("central", "most similar to the others")]:
        r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--keep", rule])
        t = jsonl(r.stdout)
        assert t.loc[t["keep"], "keep_reason"].tolist() == [reason, reason]
        assert t.loc[~t["keep"], "keep_reason"].isna().all()
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9"])  # no image root
    t = jsonl(r.stdout)
    assert t.loc[t["keep"], "keep_reason"].tolist() == ["images not readable: shortest path"] * 2


def test_keep_best_ties_by_shortest_path_then_path_order() -> None:
    from pairkit.mine.keep_readers import best_reader

    paths = np.array(["x/long-copy.png", "x/b.png", "x/a.png", "x/z.png"], dtype=object)
    goodness = best_reader(None, paths, lambda _: None)(np.arange(4))
    # no image root: pixels and bytes unknown, so the shortest path, then path order
    assert np.argsort(-goodness).tolist() == [2, 1, 3, 0]


def test_keep_largest_without_image_root_falls_back(tmp_path: Path) -> None:
    store = dup_store(tmp_path)
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--keep", "largest"])
    assert r.exit_code == 0
    assert "image_root is unset; using --keep first" in r.stderr


def test_keep_central(tmp_path: Path) -> None:
    store = dup_store(tmp_path)
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9", "--keep", "central"])
    assert r.exit_code == 0
    assert jsonl(r.stdout)["group"].tolist() == [0, 0, 1, 1]


def test_end_to_end_with_embed(tmp_path: Path, image_folder: Path) -> None:
    first = sorted(image_folder.glob("class0/*"))[0]
    shutil.copy(first, image_folder / f"zz{first.suffix}")
    store = tmp_path / "store"
    r = runner.invoke(app, ["embed", str(image_folder), "-o", str(store), "--model", "fake",
                            "--views", "2", "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["dedup", str(store), "--exact-only", "--paths-only", "--drop",
                            "--keep", "first"])
    assert r.exit_code == 0, r.output
    assert r.stdout == f"zz{first.suffix}\n"
    # best: a byte copy has the same pixels and bytes, so the shorter path is kept
    r = runner.invoke(app, ["dedup", str(store), "--exact-only", "--paths-only", "--drop"])
    assert r.exit_code == 0, r.output
    assert r.stdout == f"class0/{first.name}\n"
    assert "1 group: 2 of 13 sources" in r.stderr
    r = runner.invoke(app, ["dedup", str(store), "-t", "0.9"])
    t = jsonl(r.stdout)
    assert r.exit_code == 0 and len(t) >= 2
    assert (t["similarity"] <= 1.0).all()  # float16 rows: clipped, never 1.00005


def test_device_cuda_without_gpu(tmp_path: Path) -> None:
    from pairkit.index.backend import faiss_gpus, torch_cuda_devices

    if faiss_gpus() or torch_cuda_devices():  # FAISS or the torch search would run there
        pytest.skip("a GPU is visible")
    store = dup_store(tmp_path)
    r = runner.invoke(app, ["dedup", str(store), "--device", "cuda"])
    assert r.exit_code == 1 and "(use --device cpu)" in r.stderr
    r = runner.invoke(app, ["dedup", str(store), "--device", "cuda:0"])
    assert r.exit_code == 1 and "(use --device cpu)" in r.stderr


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["-t", "1.5"], 2, "--threshold must be in (0, 1], got 1.5"),
        (["-t", "0"], 2, "--threshold must be in (0, 1], got 0"),
        (["--keep", "biggest"], 2, "'biggest' is not one of 'best', 'first', 'largest'"),
        (["--print0"], 2, "--print0 needs --paths-only"),
        (["--batch-size", "0"], 2, "--batch-size must be >= 1, got 0"),
        (["--device", "tpu"], 2, "--device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
        (["--absolute"], 2, "--absolute needs the store's image_root"),
        (["-o", "groups.txt"], 2, "can't tell the table format of groups.txt"),
        (["--gpu"], 2, "--gpu was replaced: use --device cuda"),
    ],
)
def test_bad_options(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    store = dup_store(tmp_path)
    r = runner.invoke(app, ["dedup", str(store), *args])
    assert r.exit_code == code, r.output
    assert r.stderr.lower().startswith(("error: ", "usage: ")) and message in r.stderr
    assert "Traceback" not in r.output


def test_missing_and_broken_store(tmp_path: Path) -> None:
    r = runner.invoke(app, ["dedup", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "not found" in r.stderr
    (tmp_path / "empty").mkdir()
    r = runner.invoke(app, ["dedup", str(tmp_path / "empty")])
    assert r.exit_code == 1 and "is not a pairkit store" in r.stderr


def test_exact_only_on_a_store_without_file_hashes_is_refused(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): ``--exact-only`` compares file hashes; on an
    imported store without them it reported "0 groups", exit 0, as if no file were
    repeated. Refused (exit 1), plain and ``--against``, naming what is missing."""
    for name in ("a", "b"):
        write_store(tmp_path / name, np.eye(3, dtype=np.float32),
                    pd.DataFrame({"path": ["x.png", "y.png", "z.png"]}), dtype="float32")
    for args in (["dedup", str(tmp_path / "a"), "--exact-only"],
                 ["dedup", str(tmp_path / "a"), "--against", str(tmp_path / "b"),
                  "--exact-only"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 1, (args, r.output)
        assert "--exact-only compares file hashes" in r.stderr, r.output
