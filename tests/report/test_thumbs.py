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
