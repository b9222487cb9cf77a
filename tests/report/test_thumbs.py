"""Thumbnails: only files under the image root, broken and hostile files get a reason."""

from __future__ import annotations

import pytest
from PIL import Image

from pairkit.report.thumbs import make_thumbnail, make_thumbnails, resolve_under, thumb_name
from tests.report.kit import bomb_png, image


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "images"
    image(r / "a/ok.png", 0, size=(300, 200))
    image(tmp_path / "secret.png", 1)
    (r / "out.png").symlink_to(tmp_path / "secret.png")
    (r / "inside.png").symlink_to(r / "a/ok.png")
    (r / "loop").symlink_to(r / "loop")
    return r.resolve()


@pytest.mark.parametrize(("rel", "reason"), [
    ("../secret.png", "outside the image root"),
    ("a/../../secret.png", "outside the image root"),
    ("out.png", "outside the image root"),  # a symlink that leaves the root
    ("/etc/passwd", "absolute path refused"),
    ("\\\\server\\share.png", "absolute path refused"),
    ("C:/Windows/x.png", "absolute path refused"),
    ("a/missing.png", "file not found"),
    ("a", "not a file"),
    ("loop", "unreadable path"),
    ("a/ok\0.png", "unreadable path"),
    ("", "no path"),
])
def test_resolve_under_refuses(root, rel, reason):
    real, problem = resolve_under(root, rel)
    assert real is None and reason in problem


def test_resolve_under_accepts_files_and_links_inside(root):
    assert resolve_under(root, "a/ok.png") == (root / "a/ok.png", None)
    # Found by a bug hunt (2026-12-07): any path whose second character is ':' was
    # refused as a Windows drive ("absolute path refused"), so a class folder 'e:1' or
    # '0:cats' under the root got no thumbnail, though import, dedup and train take it
    for rel in ("e:1/b.png", "0:cats/b.png", "c:x.png"):
        image(root / rel, 2)
        assert resolve_under(root, rel) == (root / rel, None), rel
    assert resolve_under(root, "./a/../a/ok.png") == (root / "a/ok.png", None)
    assert resolve_under(root, "inside.png") == (root / "a/ok.png", None)


def test_thumbnail_is_a_small_jpeg(root, tmp_path):
    dst = tmp_path / "t.jpg"
    assert make_thumbnail(root / "a/ok.png", dst, 64) is None
    with Image.open(dst) as im:
        assert im.format == "JPEG" and im.size == (64, 43)


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "empty file"),
    (b"hello, not an image", "not an image"),
    (None, "decompression bomb refused"),
])
def test_broken_files_get_a_reason_and_no_file(tmp_path, content, reason):
    src = tmp_path / "x.png"
    if content is None:
        bomb_png(src)
    else:
        src.write_bytes(content)
    dst = tmp_path / "t.jpg"
    problem = make_thumbnail(src, dst, 64)
    assert problem is not None and reason in problem
    assert not dst.exists()


def test_thumbnails_in_parallel_match_one_by_one(tmp_path):
    files = []
    for i in range(12):
        image(tmp_path / f"src/{i}.png", i)
        files.append((tmp_path / f"src/{i}.png").resolve())
    (tmp_path / "src/bad.png").write_bytes(b"junk")
    files.append((tmp_path / "src/bad.png").resolve())
    many = make_thumbnails(files, tmp_path / "par", 32, workers=2)
    one = make_thumbnails(files, tmp_path / "seq", 32, workers=1)
    assert many == one
    assert sum(t.file is not None for t in many.values()) == 12
    for f, t in many.items():
        if t.file:
            assert t.file == thumb_name(f) and (tmp_path / "par" / t.file).is_file()
            assert (tmp_path / "par" / t.file).read_bytes() == (
                tmp_path / "seq" / t.file).read_bytes()
    assert "not an image" in many[files[-1]].problem


def test_a_container_reached_through_a_link_out_of_the_root_is_refused(tmp_path):
    """A tar shard under the root is read member by member (``SHARD.tar/MEMBER``); a link
    named like a shard that points to a tar outside the root is refused as any file is."""
    import tarfile

    r = tmp_path / "images"
    r.mkdir()
    image(tmp_path / "m.png", 2)
    for tar in (r / "in.tar", tmp_path / "out.tar"):
        with tarfile.open(tar, "w") as tf:
            tf.add(tmp_path / "m.png", arcname="m.png")
    (r / "link.tar").symlink_to(tmp_path / "out.tar")
    (r / "a").mkdir()
    root = r.resolve()
    assert resolve_under(root, "in.tar/m.png") == (root / "in.tar" / "m.png", None)
    for rel in ("link.tar/m.png", "a/../../out.tar/m.png"):
        real, problem = resolve_under(root, rel)
        assert real is None and "outside the image root" in problem, rel


def test_a_file_over_the_size_bound_gets_no_thumbnail(tmp_path, monkeypatch):
    """Files larger than MAX_FILE_BYTES are not opened (the bound lowered to 1 KiB here)."""
    import pairkit.report.thumbs as thumbs

    image(tmp_path / "x.png", 3, size=(300, 200))
    size = (tmp_path / "x.png").stat().st_size
    assert size > 1024
    monkeypatch.setattr(thumbs, "MAX_FILE_BYTES", size)
    assert make_thumbnail(tmp_path / "x.png", tmp_path / "ok.jpg", 32) is None
    monkeypatch.setattr(thumbs, "MAX_FILE_BYTES", size - 1)
    problem = make_thumbnail(tmp_path / "x.png", tmp_path / "t.jpg", 32)
    assert problem is not None and problem.startswith("file larger than")
    assert not (tmp_path / "t.jpg").exists()
