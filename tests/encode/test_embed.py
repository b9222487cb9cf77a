"""pairkit embed end to end: store, errors report, resume, option changes, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from tests.conftest import make_images

runner = CliRunner()


def embed(*args: str):
    return runner.invoke(app, ["embed", *map(str, args), "--model", "fake", "--quiet"])


def by_key(store: Store) -> dict[tuple[str, int], np.ndarray]:
    vecs = store.vectors()
    items = store.items
    pairs = zip(items["path"], items["view"], strict=True)
    return {(p, int(v)): vecs[i] for i, (p, v) in enumerate(pairs)}


def test_embed_folder_with_views_and_labels(image_folder, tmp_path):
    out = tmp_path / "store"
    result = runner.invoke(app, ["embed", str(image_folder), "-o", str(out), "--model", "fake",
                                 "--views", "2", "--labels", "folder"])
    assert result.exit_code == 0, result.output
    assert "embedded 12 images (24 views), skipped 0" in result.output
    store = Store.open(out)
    assert store.count == 24 and store.dim == 48 and store.dtype == "float16"
    items = store.items
    assert items["view"].tolist() == [0, 1] * 12
    assert (items.groupby("source")["view"].count() == 2).all()
    assert items["label"].tolist()[:2] == ["class0", "class0"]
    assert items["file_sha256"].str.len().eq(64).all()
    np.testing.assert_allclose(np.linalg.norm(store.vectors(), axis=1), 1.0, atol=2e-3)
    assert store.manifest["embedding"]["views"] == 2
    assert not (out / "errors.jsonl").exists()


def test_broken_files_are_recorded_and_run_goes_on(image_folder, tmp_path):
    (image_folder / "class0" / "empty.jpg").write_bytes(b"")
    (image_folder / "class1" / "text.png").write_text("not an image")
    good = (image_folder / "class2" / "img0.jpg").read_bytes()
    (image_folder / "class2" / "cut.jpg").write_bytes(good[: len(good) // 2])
    (image_folder / "readme.txt").write_text("ignored silently")
    out = tmp_path / "store"
    result = runner.invoke(app, ["embed", str(image_folder), "-o", str(out), "--model", "fake"])
    assert result.exit_code == 0, result.output
    assert "skipped 3" in result.output
    name = Store.open(out).manifest["errors"]["file"]  # versioned (docs/formats.md)
    assert f"see {out / name}" in result.output
    errors = [json.loads(line) for line in (out / name).read_text().splitlines()]
    reasons = {e["path"]: e["reason"] for e in errors}
    assert set(reasons) == {"class0/empty.jpg", "class1/text.png", "class2/cut.jpg"}
    assert "empty file" in reasons["class0/empty.jpg"]
    assert "not an image" in reasons["class1/text.png"]
    assert "truncated" in reasons["class2/cut.jpg"]
    assert Store.open(out).count == 12


def test_rerun_embeds_nothing_and_new_files_only(image_folder, tmp_path):
    out = tmp_path / "store"
    assert embed(image_folder, "-o", out).exit_code == 0
    first = Store.open(out)
    shards_before = len(first.shards)
    result = runner.invoke(app, ["embed", str(image_folder), "-o", str(out), "--model", "fake"])
    assert result.exit_code == 0
    assert "nothing to embed: all 12 images are already in" in result.output
    assert len(Store.open(out).shards) == shards_before
    Image.new("RGB", (20, 20), (10, 200, 30)).save(image_folder / "class1" / "new.png")
    result = runner.invoke(app, ["embed", str(image_folder), "-o", str(out), "--model", "fake"])
    assert "embedded 1 images" in result.output and "already in store 12" in result.output
    store = Store.open(out)
    assert store.count == 13 and store.items["path"].iloc[-1] == "class1/new.png"
    # stored images gone from the folder: told, kept, nothing embedded again
    (image_folder / "class0" / "img0.jpg").unlink()
    (image_folder / "class1" / "new.png").unlink()
    result = runner.invoke(app, ["embed", str(image_folder), "-o", str(out), "--model", "fake"])
    assert result.exit_code == 0, result.output
    assert f"2 images in the store are no longer in {image_folder}" in result.output
    assert "nothing to embed: all 11 images are already in" in result.output
    assert Store.open(out).count == 13


def test_changed_options_refuse_without_force(image_folder, tmp_path):
    out = tmp_path / "store"
    assert embed(image_folder, "-o", out).exit_code == 0
    result = embed(image_folder, "-o", out, "--views", "2")
    assert result.exit_code == 1
    assert "made with other options (views differ)" in result.output
    assert Store.open(out).count == 12
    result = embed(image_folder, "-o", out, "--views", "2", "--force")
    assert result.exit_code == 0 and Store.open(out).count == 24


def interrupted_embed(monkeypatch, image_folder, out, args, stop_at: int) -> None:
    """``embed`` into ``out`` with the encoder's ``stop_at``-th call raising
    KeyboardInterrupt (Ctrl-C): exit 130; the real encoder back afterwards."""
    from pairkit.encode.runner import Runner

    real_call = Runner.encode
    calls = {"n": 0}

    def flaky(self, pixels):
        calls["n"] += 1
        if calls["n"] == stop_at:
            raise KeyboardInterrupt
        return real_call(self, pixels)

    monkeypatch.setattr(Runner, "encode", flaky)
    assert embed(image_folder, "-o", out, *args).exit_code == 130
    monkeypatch.setattr(Runner, "encode", real_call)


def test_interrupted_run_resumes_to_the_same_store(image_folder, tmp_path, monkeypatch):
    make_images(image_folder, n_per_class=6, classes=3, seed=5)
    clean = tmp_path / "clean"
    assert embed(image_folder, "-o", clean, "--views", "2", "--batch-size", "4").exit_code == 0

    from pairkit.encode.runner import Runner

    real_call = Runner.encode
    calls = {"n": 0}

    def flaky(self, pixels):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real_call(self, pixels)

    monkeypatch.setattr(Runner, "encode", flaky)
    out = tmp_path / "resumed"
    result = embed(image_folder, "-o", out, "--views", "2", "--batch-size", "4",
                   "--shard-rows", "4")
    assert result.exit_code == 130 and "interrupted" in result.output
    partial = Store.open(out)
    assert 0 < partial.count < 36
    monkeypatch.setattr(Runner, "encode", real_call)
    result = embed(image_folder, "-o", out, "--views", "2", "--batch-size", "4")
    assert result.exit_code == 0
    resumed, reference = by_key(Store.open(out)), by_key(Store.open(clean))
    assert resumed.keys() == reference.keys()
    for key, vec in reference.items():
        np.testing.assert_array_equal(resumed[key], vec)


def test_batch_size_and_workers_do_not_change_embeddings(image_folder, tmp_path):
    embed(image_folder, "-o", tmp_path / "a", "--views", "3", "--batch-size", "1")
    embed(image_folder, "-o", tmp_path / "b", "--views", "3", "--batch-size", "64",
          "--workers", "2")
    a, b = Store.open(tmp_path / "a"), Store.open(tmp_path / "b")
    np.testing.assert_allclose(a.vectors(), b.vectors(), atol=1e-3)
    assert a.items.equals(b.items)


def labelled_zero_and_one(image_folder, tmp_path, paths: list[str]) -> None:
    """Embed with a labels table naming ``paths`` (then labelled zero, one, two...): the
    first two name class0/img0.jpg and class1/img1.png, nothing else is labelled."""
    table = pd.DataFrame({"path": paths, "label": ["zero", "one", "two"][: len(paths)]})
    table.to_csv(tmp_path / "labels.csv", index=False)
    result = embed(image_folder, "-o", tmp_path / "s", "--labels", tmp_path / "labels.csv")
    assert result.exit_code == 0, result.output
    assert "10 of 12 images have no label" in result.output
    items = Store.open(tmp_path / "s").items.set_index("path")
    assert items.loc["class0/img0.jpg", "label"] == "zero"
    assert items.loc["class1/img1.png", "label"] == "one"
    assert pd.isna(items.loc["class2/img0.jpg", "label"])


def test_labels_from_csv(image_folder, tmp_path):
    labelled_zero_and_one(image_folder, tmp_path,
                          ["class0/img0.jpg", str(image_folder / "class1/img1.png")])


def test_labels_file_read_as_written_and_not_twice(image_folder, tmp_path):
    """Found by a CLI bug hunt (2026-12-06): labels "01" and "1" in a CSV became one class
    "1.0"; a path listed twice with two labels took the last one silently."""
    (tmp_path / "labels.csv").write_text("path,label\nclass0/img0.jpg,01\n"
                                         "class1/img1.png,1\n")
    result = embed(image_folder, "-o", tmp_path / "s", "--labels", tmp_path / "labels.csv")
    assert result.exit_code == 0, result.output
    items = Store.open(tmp_path / "s").items.set_index("path")
    assert items.loc["class0/img0.jpg", "label"] == "01"
    assert items.loc["class1/img1.png", "label"] == "1"
    (tmp_path / "twice.csv").write_text("path,label\nclass0/img0.jpg,a\nclass0/img0.jpg,b\n"
                                        "class1/img1.png,c\nclass1/img1.png,c\n")
    result = embed(image_folder, "-o", tmp_path / "t", "--labels", tmp_path / "twice.csv")
    assert result.exit_code == 1, result.output
    assert "'class0/img0.jpg' is listed twice, labelled 'a' and 'b'" in result.output
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("first, then", [((), ("--labels", "folder")),
                                         (("--labels", "folder"), ())])
def test_resume_with_other_labels_is_refused(image_folder, tmp_path, first, then):
    """Found by a CLI bug hunt (2026-12-06): a rerun that added images with another
    --labels than the store was made with mixed labelled and unlabelled rows (1 of 8
    labelled) and rewrote the manifest's ``labels``, without a word."""
    out = tmp_path / "s"
    (image_folder / "class0" / "img1.png").rename(tmp_path / "later.png")
    assert embed(image_folder, "-o", out, *first).exit_code == 0
    before = Store.open(out).items.copy()
    (tmp_path / "later.png").rename(image_folder / "class0" / "img1.png")
    result = embed(image_folder, "-o", out, *then)
    assert result.exit_code == 1, result.output
    was, now = ("no labels", "--labels folder") if not first else ("--labels folder",
                                                                    "no labels")
    assert f"was embedded with {was}, this run has {now}" in result.output
    pd.testing.assert_frame_equal(Store.open(out).items, before)
    assert embed(image_folder, "-o", out, *first).exit_code == 0  # the same: resumes
    assert len(Store.open(out).items) == len(before) + 1


def test_unicode_names_and_vanished_files(image_folder, tmp_path, monkeypatch):
    Image.new("RGB", (20, 20), (200, 10, 30)).save(image_folder / "class0" / "ünï 画像.png")
    from pairkit.encode import sources

    real = sources.discover_images

    def with_ghost(root):
        images, problems = real(root)
        ghost = sources.ImageFile("class0/ghost.jpg", Path(root) / "class0" / "ghost.jpg")
        return sorted([*images, ghost], key=lambda f: f.path), problems

    monkeypatch.setattr(sources, "discover_images", with_ghost)
    result = embed(image_folder, "-o", tmp_path / "s")
    assert result.exit_code == 0, result.output
    store = Store.open(tmp_path / "s")
    assert "class0/ünï 画像.png" in set(store.items["path"])
    errors = (tmp_path / "s" / store.manifest["errors"]["file"]).read_text(encoding="utf-8")
    assert "vanished" in errors


@pytest.mark.parametrize("case", ["missing", "empty", "file_output", "all_broken"])
def test_bad_input_is_one_line_exit_1(tmp_path, case):
    images = tmp_path / "imgs"
    out = tmp_path / "store"
    if case != "missing":
        images.mkdir()
    if case == "file_output":
        make_images(images, 1, 1)
        out.write_text("precious")
    if case == "all_broken":
        (images / "a.jpg").write_bytes(b"")
        (images / "b.png").write_bytes(b"xx")
    result = embed(images, "-o", out)
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    if case == "file_output":
        assert out.read_text() == "precious"


def test_tiny_openclip_through_the_cli(image_folder, tmp_path):
    import open_clip

    open_clip.add_model_config(Path(__file__).parent / "data" / "pairkit-tiny-clip.json")
    result = runner.invoke(app, ["embed", str(image_folder), "-o", str(tmp_path / "s"),
                                 "--model", "openclip/pairkit-tiny-clip", "--pretrained", "none",
                                 "--quiet", "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    store = Store.open(tmp_path / "s")
    assert store.dim == 32 and store.encoder["pretrained"] == "none"


def test_no_traceback_and_fast_help():
    proc = subprocess.run([sys.executable, "-m", "pairkit", "embed", "/no/such/dir", "-o",
                           "/tmp/pairkit-never"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: image folder /no/such/dir not found"
    code = ("import sys, pairkit.cli.main; "
            "heavy = [m for m in ('torch', 'faiss', 'open_clip', 'pandas', 'sklearn') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_embed_from_another_folder_is_refused(image_folder, tmp_path):
    """Issue 20.2: a second folder appended to the store and re-rooted it (the old rows then
    pointed at files that are not there), or passed a different image under the same
    relative path for one already embedded."""
    out = tmp_path / "store"
    assert embed(image_folder, "-o", out).exit_code == 0
    before = (out / "manifest.json").read_bytes()
    other = tmp_path / "other"
    make_images(other, n_per_class=4, classes=3, seed=9)  # same relative paths, other pixels
    small = tmp_path / "small"
    make_images(small, n_per_class=1, classes=1, seed=3)
    (small / "class0" / "img0.jpg").rename(small / "class0" / "new.jpg")
    for folder in (other, small):
        result = embed(folder, "-o", out)
        assert result.exit_code == 1, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and f"holds images of {image_folder.resolve()}" in lines[0]
        assert (out / "manifest.json").read_bytes() == before
    # a folder that moved as a whole is the same folder
    moved = tmp_path / "moved"
    image_folder.rename(moved)
    Image.new("RGB", (20, 20), (10, 200, 30)).save(moved / "class1" / "new.png")
    result = embed(moved, "-o", out)
    assert result.exit_code == 0, result.output
    store = Store.open(out)
    assert store.count == 13 and store.manifest["image_root"] == str(moved.resolve())


@pytest.mark.parametrize("stop_at", [2, 3, 5])
def test_resumed_run_with_broken_files_has_the_clean_store_id(image_folder, tmp_path,
                                                              monkeypatch, stop_at):
    """Issue 20.9: a resumed run cut its shards where the rerun's batches fell (a broken
    file shifted them), so its rows equalled a clean run's but its store_id did not, and
    pair tables of the clean store were refused on it. Shards now end at multiples of
    --shard-rows, wherever a run stopped."""
    make_images(image_folder, n_per_class=6, classes=3, seed=5)
    (image_folder / "class0" / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    (image_folder / "class1" / "empty.png").write_bytes(b"")
    args = ["--views", "2", "--batch-size", "6", "--shard-rows", "4"]  # 3 images a batch
    clean = tmp_path / "clean"
    assert embed(image_folder, "-o", clean, *args).exit_code == 0
    out = tmp_path / "resumed"
    interrupted_embed(monkeypatch, image_folder, out, args, stop_at)
    assert embed(image_folder, "-o", out, *args).exit_code == 0
    resumed, reference = Store.open(out), Store.open(clean)
    assert [s.rows for s in resumed.shards] == [s.rows for s in reference.shards]
    assert resumed.content_id == reference.content_id


def test_absolute_label_paths_do_not_follow_a_files_link(tmp_path):
    """Found by a bug hunt (2026-12-06): an absolute path in --labels was resolved through
    a symlink, so the label of ``l.png`` (a link) went to its target, and a table naming
    both was refused as one path listed twice. The folder part is still resolved (the
    root reached through a linked folder)."""
    from pairkit.encode.images import ImageFile
    from pairkit.encode.sources import resolve_labels

    root = tmp_path / "real"
    (root / "a").mkdir(parents=True)
    (root / "a" / "img.png").write_bytes(b"x")
    os.symlink("img.png", root / "a" / "l.png")
    os.symlink(root, tmp_path / "via")
    images = [ImageFile("a/img.png", root / "a" / "img.png"),
              ImageFile("a/l.png", root / "a" / "l.png")]
    table = pd.DataFrame({"path": [str(root / "a" / "l.png"), str(tmp_path / "via/a/img.png")],
                          "label": ["link", "orig"]})
    table.to_csv(tmp_path / "labels.csv", index=False)
    labels, missing = resolve_labels(str(tmp_path / "labels.csv"), images, root)
    assert labels == {"a/img.png": "orig", "a/l.png": "link"} and missing == 0


@pytest.mark.parametrize("stop_at", [2, 3, 4])
def test_interrupted_run_with_views_not_dividing_shard_rows_keeps_every_view(
        image_folder, tmp_path, monkeypatch, stop_at):
    """Found by a bug hunt (2026-12-06): with --views 3 and --shard-rows 4, a shard ended
    inside an image's views; an interrupted run committed some of its views, the resumed
    run took the image as done, and its missing views were lost for good. Shards now hold
    whole images (--shard-rows rounded down to a multiple of --views)."""
    make_images(image_folder, n_per_class=6, classes=3, seed=5)
    args = ["--views", "3", "--batch-size", "6", "--shard-rows", "4"]  # 2 images a batch
    clean = tmp_path / "clean"
    assert embed(image_folder, "-o", clean, *args).exit_code == 0
    out = tmp_path / "resumed"
    interrupted_embed(monkeypatch, image_folder, out, args, stop_at)
    partial = Store.open(out)
    assert (partial.items.groupby("source")["view"].count() == 3).all()
    assert embed(image_folder, "-o", out, *args).exit_code == 0
    resumed, reference = Store.open(out), Store.open(clean)
    assert resumed.count == reference.count == 18 * 3
    assert (resumed.items.groupby("source")["view"].count() == 3).all()
    assert [s.rows for s in resumed.shards] == [s.rows for s in reference.shards]
    assert resumed.content_id == reference.content_id


def test_resuming_a_store_with_torn_images_says_so(image_folder, tmp_path, monkeypatch):
    """Found by a bug hunt (2026-12-06): a store whose interrupted run (an earlier pairkit)
    committed some of an image's views was resumed without a word; the rerun now warns
    that those images keep fewer views and that --force embeds all again."""
    from pairkit.encode import embedder

    monkeypatch.setattr(embedder, "shard_unit", lambda rows, views: rows)  # the old cut
    out = tmp_path / "store"
    args = ["--views", "3", "--batch-size", "6", "--shard-rows", "4"]
    interrupted_embed(monkeypatch, image_folder, out, args, 2)
    result = embed(image_folder, "-o", out, *args)
    assert result.exit_code == 0, result.output
    assert "1 images in store" in result.output and "fewer than 3 views" in result.output
    assert "--force" in result.output


def _store_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


@pytest.mark.parametrize("failure", ["model", "no_image", "interrupt_loading"])
def test_force_keeps_the_old_store_when_the_new_run_fails(image_folder, tmp_path,
                                                          monkeypatch, failure):
    """Found by a bug hunt (2026-12-06): embed --force removed the old store before the
    model loaded or any image was embedded, so a checkpoint that did not fit, a folder
    without one readable image or Ctrl-C while loading left nothing (or an empty store).
    The old store is now replaced only when the new run commits its first shard."""
    out = tmp_path / "store"
    assert embed(image_folder, "-o", out, "--views", "2").exit_code == 0
    before = _store_files(out)
    images = image_folder
    if failure == "no_image":
        images = tmp_path / "bad"
        images.mkdir()
        (images / "a.jpg").write_text("x")
    else:
        from pairkit.encode import embedder

        def broken(request):
            if failure == "interrupt_loading":
                raise KeyboardInterrupt
            raise embedder.PairkitError("checkpoint bad.pt does not fit fake")

        monkeypatch.setattr(embedder, "load_encoder", broken)
    result = embed(images, "-o", out, "--force")
    assert result.exit_code == (130 if failure == "interrupt_loading" else 1), result.output
    assert _store_files(out) == before
    assert Store.open(out).count == 24


def test_a_run_that_embeds_no_image_leaves_no_store(tmp_path):
    """Found by a bug hunt (2026-12-06): a run where no image could be embedded (exit 1)
    committed an empty store whose options and labels then refused the corrected rerun;
    it now leaves no store folder, and the error names the first failure."""
    images = tmp_path / "imgs" / "c"
    images.mkdir(parents=True)
    (images / "a.jpg").write_text("x")
    out = tmp_path / "store"
    result = embed(images.parent, "-o", out)
    assert result.exit_code == 1
    assert "no image could be embedded" in result.output and "c/a.jpg" in result.output
    assert not out.exists()
    make_images(images.parent, 1, 1)
    result = embed(images.parent, "-o", out, "--labels", "folder", "--views", "2")
    assert result.exit_code == 0, result.output
    assert Store.open(out).count == 2


def test_a_run_that_embeds_no_image_keeps_other_files(tmp_path):
    """Found by a bug hunt (2026-12-06): the same, into a folder that exists: the folder
    and its files stay, no manifest is written."""
    images = tmp_path / "imgs"
    images.mkdir()
    (images / "a.jpg").write_text("x")
    out = tmp_path / "store"
    out.mkdir()
    result = embed(images, "-o", out)
    assert result.exit_code == 1
    assert sorted(p.name for p in out.iterdir()) == []


def test_resume_with_a_labels_table_that_relabels_is_refused(image_folder, tmp_path):
    """Found by a bug hunt (2026-12-06): a rerun with another labels table (or dataset
    label column) whose labels differ for images already in the store appended its rows
    with the new labels, so one class was split in two ('cat' and '0') without a word. It
    is refused; a table that agrees on the embedded images (new rows added) resumes."""
    out = tmp_path / "s"
    (image_folder / "class0" / "img2.jpg").rename(tmp_path / "later.jpg")
    (tmp_path / "a.csv").write_text("path,label\nclass0/img0.jpg,cat\nclass1/img0.jpg,dog\n")
    assert embed(image_folder, "-o", out, "--labels", tmp_path / "a.csv").exit_code == 0
    before = Store.open(out).items.copy()
    (tmp_path / "later.jpg").rename(image_folder / "class0" / "img2.jpg")
    (tmp_path / "b.csv").write_text("path,label\nclass0/img0.jpg,0\nclass0/img2.jpg,0\n"
                                    "class1/img0.jpg,1\n")
    result = embed(image_folder, "-o", out, "--labels", tmp_path / "b.csv")
    assert result.exit_code == 1, result.output
    assert "2 images in the store are labelled otherwise by this run's labels" in result.output
    assert "'class0/img0.jpg': 'cat' in the store, '0' now" in result.output
    pd.testing.assert_frame_equal(Store.open(out).items, before)
    (tmp_path / "c.csv").write_text("path,label\nclass0/img0.jpg,cat\nclass0/img2.jpg,cat\n"
                                    "class1/img0.jpg,dog\n")
    assert embed(image_folder, "-o", out, "--labels", tmp_path / "c.csv").exit_code == 0
    items = Store.open(out).items.set_index("path")
    assert items.loc["class0/img2.jpg", "label"] == "cat" and len(items) == len(before) + 1


def test_json_of_a_run_with_nothing_to_embed_names_no_device(image_folder, tmp_path):
    """Found by a bug hunt (2026-12-06): with nothing to embed, ``--json`` reported
    ``"device": "auto"`` (the option, not a device); no device ran: it is null."""
    out = tmp_path / "s"
    assert embed(image_folder, "-o", out).exit_code == 0
    r = runner.invoke(app, ["embed", str(image_folder), "-o", str(out), "--model", "fake",
                            "--json", "-q"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["images"] == 0 and summary["device"] is None


def test_a_labels_table_naming_none_of_the_images_is_refused(image_folder, tmp_path):
    table = pd.DataFrame({"path": ["photos/class0/img0.jpg", "photos/class1/img1.png"],
                          "label": ["zero", "one"]})
    table.to_csv(tmp_path / "labels.csv", index=False)
    result = embed(image_folder, "-o", tmp_path / "s", "--labels", tmp_path / "labels.csv")
    assert result.exit_code == 1, result.output
    assert "names none of the 12 images" in result.output
    assert "'photos/class0/img0.jpg'" in result.output and "'class0/img0.jpg'" in result.output
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_labels_missing_or_empty_are_no_label_in_every_format(image_folder, tmp_path, suffix):
    """Found by a bug hunt (2026-12-06): a parquet labels table with pandas' nullable
    strings (a store's own item table is one) labelled every unlabelled image '<NA>', and
    an empty label was a class of its own outside CSV."""
    table = pd.DataFrame({"path": ["class0/img0.jpg", "class1/img1.png", "class2/img0.jpg"],
                          "label": pd.array(["zero", None, ""], dtype="string")})
    f = tmp_path / f"labels{suffix}"
    table.to_csv(f, index=False) if suffix == ".csv" else table.to_parquet(f, index=False)
    result = embed(image_folder, "-o", tmp_path / "s", "--labels", f)
    assert result.exit_code == 0, result.output
    assert "11 of 12 images have no label" in result.output
    labels = Store.open(tmp_path / "s").items["label"]
    assert set(labels.dropna()) == {"zero"}


@pytest.mark.parametrize("failure", [KeyboardInterrupt, "disk full"])
def test_a_first_run_stopped_at_its_first_shard_leaves_nothing_a_rerun_refuses(
        image_folder, tmp_path, monkeypatch, failure):
    """Found by a bug hunt (hunt-n 3): a first run that logged broken files wrote
    errors.jsonl before its first shard; stopped in that shard's write (a kill, a full
    disk), it left a folder of only errors.jsonl that every rerun, --force too, refused as
    "not a pairkit store". The errors file is now written only with a commit."""
    import errno

    from pairkit.core import store_writer

    (image_folder / "class0" / "empty.jpg").write_bytes(b"")
    out = tmp_path / "store"

    def stopped(root, name, vectors, dtype):
        if failure is KeyboardInterrupt:
            raise KeyboardInterrupt
        raise OSError(errno.ENOSPC, "No space left on device", str(root))

    monkeypatch.setattr(store_writer, "write_shard", stopped)
    result = embed(image_folder, "-o", out)
    assert result.exit_code == (130 if failure is KeyboardInterrupt else 1), result.output
    monkeypatch.undo()
    assert not out.exists() or not [p.name for p in out.iterdir() if "errors" in p.name]
    for force in ([], ["--force"]):
        result = embed(image_folder, "-o", out, *force)
        assert result.exit_code == 0, result.output
        store = Store.open(out)
        assert store.count == 12
        assert store.read_errors() == [{"path": "class0/empty.jpg",
                                        "reason": store.read_errors()[0]["reason"]}]


def test_force_keeps_the_old_store_when_the_first_shard_fails(image_folder, tmp_path,
                                                              monkeypatch):
    """Found by a bug hunt (hunt-n 1, 2): embed --force removed the old store when its
    first shard was ready, before writing it, so a full disk (or a kill) in that write
    lost the old store, and one with a saved index was then refused by every writer.
    The old store now stays whole until the new one's first commit."""
    import errno

    from pairkit.core import store_writer

    out = tmp_path / "store"
    assert embed(image_folder, "-o", out, "--views", "2").exit_code == 0
    before = _store_files(out)
    real = store_writer.write_shard

    def full(root, name, vectors, dtype):
        with store_writer.atomic_path(root / name):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_writer, "write_shard", full)
    result = embed(image_folder, "-o", out, "--force")
    assert result.exit_code == 1 and "disk full" in result.output, result.output
    assert _store_files(out) == before and Store.open(out).count == 24
    monkeypatch.setattr(store_writer, "write_shard", real)
    assert embed(image_folder, "-o", out, "--force").exit_code == 0
    assert Store.open(out).count == 12
    assert set(_store_files(out)) == {"manifest.json", *(s.file for s in Store.open(out).shards),
                                      Store.open(out).manifest["items"]["file"]}


def test_workers_above_the_cpus_are_capped_in_one_warning(image_folder, tmp_path):
    """Found by a bug hunt (hunt-s 7): --workers 4 on 2 CPUs printed torch's two four-line
    DataLoader warnings, even under -q, and --workers 1000 started 1000 processes for 20
    images (117 s)."""
    from pairkit.core.threads import available_cpus

    proc = subprocess.run([sys.executable, "-m", "pairkit", "embed", str(image_folder), "-o",
                           str(tmp_path / "s"), "--model", "pixels", "--decode", "cpu",
                           "--batch-size", "2", "--workers", "64", "-q"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert proc.returncode == 0, proc.stderr
    images = len(Store.open(tmp_path / "s").items)
    batches = -(-images // 2)
    cpus = available_cpus()
    assert proc.stderr.splitlines() == [
        f"warning: --workers 64 capped at {min(cpus, batches)}: at most one decoding process "
        f"per CPU this process may use ({cpus}) and per batch ({batches})"], proc.stderr


def test_folder_labels_are_the_first_sub_folder():
    """``--labels folder``: an image's label is its first sub-folder under the root (the
    ImageFolder convention), also for images deeper down; one at the root has none
    (hunt 3b: the innermost folder survived; every test image sat one level deep)."""
    from pairkit.encode.images import ImageFile
    from pairkit.encode.sources import resolve_labels

    root = Path("/photos")
    files = [ImageFile(p, root / p) for p in ("cat/indoor/1.jpg", "dog/2.jpg", "3.jpg")]
    labels, missing = resolve_labels("folder", files, root)
    assert labels == {"cat/indoor/1.jpg": "cat", "dog/2.jpg": "dog", "3.jpg": None}
    assert missing == 1


def test_a_moved_folder_that_lacks_stored_images_is_another_folder(image_folder, tmp_path):
    """The old folder gone and the new one without every stored image: not the same
    folder moved, refused (its rows would be relative to another folder)."""
    out = tmp_path / "store"
    assert embed(image_folder, "-o", out).exit_code == 0
    old_root = str(image_folder.resolve())
    before = (out / "manifest.json").read_bytes()
    moved = tmp_path / "moved"
    image_folder.rename(moved)
    (moved / "class0" / "img0.jpg").unlink()
    result = embed(moved, "-o", out)
    assert result.exit_code == 1, result.output
    assert f"holds images of {old_root}, not {moved.resolve()}" in result.output
    assert (out / "manifest.json").read_bytes() == before


def test_resume_with_a_labels_table_of_the_new_images_only(image_folder, tmp_path):
    """An image already in the store that this run's labels table does not name is not
    labelled otherwise: a table of the new images alone resumes, the stored labels kept."""
    out = tmp_path / "s"
    (image_folder / "class0" / "img2.jpg").rename(tmp_path / "later.jpg")
    (tmp_path / "a.csv").write_text("path,label\nclass0/img0.jpg,cat\nclass1/img0.jpg,dog\n")
    assert embed(image_folder, "-o", out, "--labels", tmp_path / "a.csv").exit_code == 0
    (tmp_path / "later.jpg").rename(image_folder / "class0" / "img2.jpg")
    (tmp_path / "new.csv").write_text("path,label\nclass0/img2.jpg,cat\n")
    result = embed(image_folder, "-o", out, "--labels", tmp_path / "new.csv")
    assert result.exit_code == 0, result.output
    items = Store.open(out).items.set_index("path")
    assert items.loc["class0/img2.jpg", "label"] == "cat"
    assert items.loc["class0/img0.jpg", "label"] == "cat"
    assert items.loc["class1/img0.jpg", "label"] == "dog"


def test_no_label_warning_counts_only_the_images_embedded(image_folder, tmp_path):
    """Found by a bug hunt: 'N of M images have no label' was counted over every file
    listed, before decoding, so files that then failed to decode (skipped, not in the
    store) were counted in both N and M."""
    import shutil

    shutil.copy(image_folder / "class0" / "img0.jpg", image_folder / "top.jpg")
    (image_folder / "broken.png").write_bytes(b"not a png")  # unlabelled, then skipped
    (image_folder / "class1" / "broken.jpg").write_bytes(b"not a jpeg")  # labelled, skipped
    result = embed(image_folder, "-o", tmp_path / "s", "--labels", "folder")
    assert result.exit_code == 0, result.output
    assert "warning: 1 of 13 images have no label" in result.output, result.output
    items = Store.open(tmp_path / "s").items
    assert len(items) == 13 and int(items["label"].isna().sum()) == 1
    # a rerun with nothing left to embed counts the store's images of the listing
    result = embed(image_folder, "-o", tmp_path / "s", "--labels", "folder")
    assert result.exit_code == 0, result.output
    assert "1 of 13 images have no label" in result.output, result.output


def test_labels_table_paths_are_normalised_and_kept_under_the_root(image_folder, tmp_path):
    """Found by a bug hunt: a labels table's 'class0/../class0/img0.jpg' labelled nothing
    (matched as written against the listing's 'class0/img0.jpg'). Both sides are now
    normalised as posix paths; a path that leaves the image root labels nothing, even one
    that comes back into it by name."""
    labelled_zero_and_one(image_folder, tmp_path, [
        "class0/../class0/img0.jpg", "./class1//img1.png", "class2/../../images/class2/img0.jpg"])
    # one image under two spellings with two labels is listed twice
    table = pd.DataFrame({"path": ["class0/img0.jpg", "class0/x/../img0.jpg"],
                          "label": ["zero", "nought"]})
    table.to_csv(tmp_path / "labels2.csv", index=False)
    result = embed(image_folder, "-o", tmp_path / "s2", "--labels", tmp_path / "labels2.csv")
    assert result.exit_code == 1
    assert "'class0/img0.jpg' is listed twice, labelled 'zero' and 'nought'" in result.output
