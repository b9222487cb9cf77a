"""Webdataset input without Ray: brace patterns, listing tar shards (labels, bad members),
and embed of shards giving the same vectors as the same images in a folder."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.encode.webdataset import discover_webdataset, expand_braces, list_members
from pairkit.errors import UsageError
from tests.conftest import make_images

runner = CliRunner()


def add(tf: tarfile.TarFile, name: str, data: bytes, kind: bytes = tarfile.REGTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def write_shards(folder: Path, images: list[Path], per_shard: int = 5) -> list[Path]:
    """The images as webdataset shards: key.jpg/.png + key.cls (class index) + key.json."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    for s in range(0, len(images), per_shard):
        path = folder / f"{s // per_shard:05d}.tar"
        with tarfile.open(path, "w") as tf:
            for p in images[s:s + per_shard]:
                key = f"{p.parent.name}_{p.stem}"
                add(tf, f"{key}{p.suffix}", p.read_bytes())
                add(tf, f"{key}.cls", p.parent.name.encode())
                add(tf, f"{key}.json", json.dumps({"label": "ignored: .cls wins"}).encode())
        shards.append(path)
    return shards


def test_expand_braces() -> None:
    assert expand_braces("s/{00008..00011}.tar") == [f"s/{i:05d}.tar" for i in range(8, 12)]
    assert expand_braces("{a,b}/{1..2}.tar") == ["a/1.tar", "a/2.tar", "b/1.tar", "b/2.tar"]
    assert expand_braces("x.tar") == ["x.tar"]
    assert expand_braces("{9..10}.tar") == ["9.tar", "10.tar"]  # no padding asked for
    for bad in ("{3..1}.tar", "{x}.tar", "{1..2.tar"):
        with pytest.raises(UsageError):
            expand_braces(bad)


def test_listing_labels_and_bad_members(tmp_path: Path) -> None:
    jpg = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (8, 8), (200, 10, 10)).save(jpg, "JPEG")
    shard = tmp_path / "00000.tar"
    with tarfile.open(shard, "w") as tf:
        add(tf, "a.jpg", jpg.getvalue())
        add(tf, "a.cls", b" 3\n")
        add(tf, "dir/b.seg.png", b"not a png")  # key dir/b, extension seg.png: an image
        add(tf, "dir/b.json", json.dumps({"label": 7}).encode())
        add(tf, "c.jpg", jpg.getvalue())
        add(tf, "c.json", b"{broken")
        add(tf, "../up.jpg", jpg.getvalue())
        add(tf, "/abs.jpg", jpg.getvalue())
        add(tf, "a.jpg", b"second copy")
        add(tf, "link.jpg", b"", tarfile.SYMTYPE)
        add(tf, "notes.txt", b"ignored")
    files, problems, labels = list_members(shard, "00000.tar")
    assert [f.path for f in files] == ["00000.tar/a.jpg", "00000.tar/c.jpg",
                                       "00000.tar/dir/b.seg.png"]
    assert labels == {"00000.tar/a.jpg": "3", "00000.tar/c.jpg": None,
                      "00000.tar/dir/b.seg.png": "7"}
    reasons = dict(problems)
    assert "leaves the shard" in reasons["00000.tar/../up.jpg"]
    assert "leaves the shard" in reasons["00000.tar//abs.jpg"]
    assert "duplicate member name" in reasons["00000.tar/a.jpg"]
    assert "not a regular file" in reasons["00000.tar/link.jpg"]
    from pairkit.encode.images import read_image_bytes

    assert read_image_bytes(files[0]) == jpg.getvalue()  # read by offset


def test_damaged_missing_and_compressed_shards(tmp_path: Path) -> None:
    good = tmp_path / "00000.tar"
    with tarfile.open(good, "w") as tf:
        for i in range(3):
            add(tf, f"k{i}.jpg", b"x" * 3000)
    data = good.read_bytes()
    (tmp_path / "00001.tar").write_bytes(data[:512 * 8])  # cut inside the second member
    import gzip

    (tmp_path / "00002.tar").write_bytes(gzip.compress(data))
    (tmp_path / "00003.tar").write_bytes(b"not a tar at all" * 10)
    root, files, problems, _ = discover_webdataset(tmp_path / "{00000..00004}.tar")
    assert root == tmp_path.resolve()
    paths = [f.path for f in files]
    assert paths[:3] == ["00000.tar/k0.jpg", "00000.tar/k1.jpg", "00000.tar/k2.jpg"]
    reasons = dict(problems)
    assert "gzip-compressed" in reasons["00002.tar"]
    assert "not a tar file" in reasons["00003.tar"]
    assert reasons[str(tmp_path / "00004.tar")] == "tar shard not found"
    # the cut shard: what lies before the damage is listed, reading past the end fails
    from pairkit.encode.images import DecodeError, read_image_bytes

    cut = [f for f in files if f.path.startswith("00001.tar/")]
    assert cut and cut[0].path == "00001.tar/k0.jpg"
    assert read_image_bytes(cut[0]) == b"x" * 3000
    for f in cut[1:]:
        with pytest.raises(DecodeError, match="truncated tar member"):
            read_image_bytes(f)
    with pytest.raises(Exception, match="no tar shard found"):
        discover_webdataset(tmp_path / "{00007..00009}.tar")


def test_embed_shards_equals_the_folder_and_resumes(tmp_path: Path) -> None:
    """The same images embedded from a folder and from tar shards: the same vectors,
    labels from .cls; a rerun embeds nothing; a new shard is appended."""
    images = make_images(tmp_path / "img", n_per_class=4, classes=3)
    shards = write_shards(tmp_path / "wds", images[:10])
    (tmp_path / "wds" / "00001.tar").write_bytes(b"")  # the second shard broken
    folder = runner.invoke(app, ["embed", str(tmp_path / "img"), "-o", str(tmp_path / "f"),
                                 "--model", "fake", "--views", "2", "-q"])
    assert folder.exit_code == 0, folder.output
    spec = str(tmp_path / "wds" / "{00000..00002}.tar")
    r = runner.invoke(app, ["embed", spec, "-o", str(tmp_path / "w"), "--model", "fake",
                            "--views", "2"])
    assert r.exit_code == 0, r.output
    assert "embedded 5 images (10 views), skipped 2" in r.output
    w, f = Store.open(tmp_path / "w"), Store.open(tmp_path / "f")
    assert w.manifest["labels"] == "webdataset"
    assert w.manifest["image_root"] == str((tmp_path / "wds").resolve())
    errors = {e["path"]: e["reason"] for e in w.read_errors()}
    assert set(errors) == {"00001.tar", spec.replace("{00000..00002}", "00002")}
    # same picture, same views (their randomness follows the path: compare view 0)
    by_name = {(p.split("/", 1)[1], v): i
               for i, (p, v) in enumerate(zip(w.items["path"], w.items["view"], strict=True))}
    fvec, wvec = f.vectors(), w.vectors()
    compared = 0
    for i, (path, view) in enumerate(zip(f.items["path"], f.items["view"], strict=True)):
        key = (path.replace("/", "_"), view)
        if key in by_name and view == 0:
            np.testing.assert_array_equal(fvec[i], wvec[by_name[key]])
            compared += 1
    assert compared == 5
    assert w.items["label"].tolist() == [p.split("/")[1].split("_")[0] for p in w.items["path"]]
    again = runner.invoke(app, ["embed", spec, "-o", str(tmp_path / "w"), "--model", "fake",
                                "--views", "2"])
    assert again.exit_code == 0 and "nothing to embed: all 5 images" in again.output
    write_shards(tmp_path / "more", images[10:], per_shard=5)
    (tmp_path / "more" / "00000.tar").rename(tmp_path / "wds" / "00002.tar")
    more = runner.invoke(app, ["embed", spec, "-o", str(tmp_path / "w"), "--model", "fake",
                               "--views", "2", "-q"])
    assert more.exit_code == 0, more.output
    assert Store.open(tmp_path / "w").count == 14  # 5 + 2 new images, 2 views each
    assert shards[0].exists()


def test_webdataset_usage_errors(tmp_path: Path) -> None:
    r = runner.invoke(app, ["embed", str(tmp_path / "{1..0}.tar"), "-o", str(tmp_path / "s"),
                            "--model", "fake"])
    assert r.exit_code == 2 and "runs backwards" in r.output
    r = runner.invoke(app, ["embed", str(tmp_path / "x.tar"), "-o", str(tmp_path / "s"),
                            "--model", "fake", "--labels", "folder"])
    assert r.exit_code == 2 and "--labels folder needs an image folder" in r.output
    r = runner.invoke(app, ["embed", str(tmp_path / "x.tar"), "-o", str(tmp_path / "s"),
                            "--model", "fake"])
    assert r.exit_code == 1 and "no tar shard found" in r.output


def test_read_member_reads_its_bytes_and_refuses_one_byte_past_the_limit(tmp_path):
    """A member of exactly --max-file-bytes is read (its bytes at its offset); one byte
    more is refused before a byte is read, as a file is."""
    from pairkit.encode.images import DecodeError
    from pairkit.encode.webdataset import read_member

    shard = tmp_path / "s.tar"
    shard.write_bytes(b"0123456789")
    assert read_member(shard, 2, 5, max_bytes=5) == b"23456"
    with pytest.raises(DecodeError, match=r"^file too large \(6 bytes > --max-file-bytes 5\)$"):
        read_member(shard, 2, 6, max_bytes=5)
    with pytest.raises(DecodeError, match="truncated tar member"):
        read_member(shard, 8, 4, max_bytes=5)


def test_shards_without_any_label_count_no_image_as_unlabelled(tmp_path):
    """Members' own labels: shards that carry none are unlabelled (0 told missing, no
    warning for every image); where some carry one, those without are counted."""
    from pairkit.encode.images import ImageFile
    from pairkit.encode.sources import resolve_labels

    files = [ImageFile(p, tmp_path / "s.tar", (0, 1)) for p in ("a.jpg", "b.jpg", "c.jpg")]
    labels, missing = resolve_labels(None, files, tmp_path, {"a.jpg": None, "b.jpg": None})
    assert labels == {"a.jpg": None, "b.jpg": None, "c.jpg": None} and missing == 0
    labels, missing = resolve_labels(None, files, tmp_path, {"a.jpg": "cat", "b.jpg": None})
    assert labels == {"a.jpg": "cat", "b.jpg": None, "c.jpg": None} and missing == 2


def test_a_folder_named_like_a_shard_is_an_image_folder(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-07): a folder of images whose name ends in .tar
    (``photos.tar/``, a folder unpacked from an archive) was taken for tar shards, 'no tar
    shard found for photos.tar' (exit 1), and --labels folder was refused; it is embedded as
    the folder it is, as a folder named ``x.parquet`` is."""
    folder = tmp_path / "photos.TAR"
    make_images(folder, n_per_class=2, classes=2)
    r = runner.invoke(app, ["embed", str(folder), "-o", str(tmp_path / "s"), "--model",
                            "pixels", "--labels", "folder", "-q"])
    assert r.exit_code == 0, r.output
    st = Store.open(tmp_path / "s")
    assert st.count == 4 and set(st.items["label"]) == {"class0", "class1"}
