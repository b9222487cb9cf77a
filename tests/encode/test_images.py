"""Decoding: every kind of bad or unusual file gets a clear outcome."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

from pairkit.encode.images import DecodeError, decode_image, discover_images, load_image


def _jpeg_bytes(arr: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", **kw)
    return buf.getvalue()


def _png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def test_zero_byte_and_vanished(tmp_path):
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(DecodeError, match="empty file"):
        load_image(tmp_path / "empty.jpg")
    with pytest.raises(DecodeError, match="vanished"):
        load_image(tmp_path / "gone.jpg")


def test_truncated_jpeg_and_png():
    arr = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    data = _jpeg_bytes(arr)
    with pytest.raises(DecodeError, match="truncated or corrupt"):
        decode_image(data[: len(data) // 2])
    png = _png_bytes(Image.fromarray(arr))
    with pytest.raises(DecodeError, match="truncated or corrupt"):
        decode_image(png[: len(png) // 2])


def test_not_an_image():
    with pytest.raises(DecodeError, match="not an image"):
        decode_image(b"this is text, not a PNG")


def test_decompression_bomb_refused(monkeypatch):
    # A 300x300 PNG against a limit of 10,000 pixels: refused at open, never allocated.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    data = _png_bytes(Image.new("RGB", (300, 300)))
    with pytest.raises(DecodeError, match="decompression bomb"):
        decode_image(data)
    # Between 1x and 2x the limit PIL only warns by default: pairkit refuses too.
    data = _png_bytes(Image.new("RGB", (120, 120)))
    with pytest.raises(DecodeError, match="decompression bomb"):
        decode_image(data)


def test_cmyk_16bit_palette_alpha_become_rgb():
    cmyk = Image.new("CMYK", (8, 8), (0, 255, 255, 0))  # pure red in CMYK
    buf = io.BytesIO()
    cmyk.save(buf, "JPEG")
    img = decode_image(buf.getvalue())
    assert img.mode == "RGB" and img.getpixel((4, 4))[0] > 200

    deep = Image.fromarray(np.full((8, 8), 65535, dtype=np.uint16))
    img = decode_image(_png_bytes(deep))
    assert img.mode == "RGB" and img.getpixel((0, 0)) == (255, 255, 255)
    half = Image.fromarray(np.full((8, 8), 32896, dtype=np.uint16))
    assert decode_image(_png_bytes(half)).getpixel((0, 0)) == (128, 128, 128)

    pal = Image.new("P", (8, 8), 0)
    pal.putpalette([0, 0, 0] + [255, 0, 0] * 255)
    pal.info["transparency"] = 0
    img = decode_image(_png_bytes(pal))
    assert img.mode == "RGB" and img.getpixel((0, 0)) == (255, 255, 255)  # over white

    la = Image.new("LA", (4, 4), (0, 0))
    assert decode_image(_png_bytes(la)).getpixel((0, 0)) == (255, 255, 255)


def test_exif_rotation_applied():
    arr = np.zeros((20, 40, 3), dtype=np.uint8)  # wide
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90 degrees
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=exif.tobytes())
    out = decode_image(buf.getvalue())
    assert out.size == (20, 40)  # now tall


def test_discover_unicode_symlink_loop_and_other_files(tmp_path):
    (tmp_path / "sub").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "sub" / "café 猫.png")
    Image.new("RGB", (4, 4)).save(tmp_path / "a.JPG")
    (tmp_path / "notes.txt").write_text("ignored")
    (tmp_path / ".hidden").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / ".hidden" / "x.png")
    os.symlink(tmp_path, tmp_path / "sub" / "loop")
    images, problems = discover_images(tmp_path)
    assert [f.path for f in images] == ["a.JPG", "sub/café 猫.png"]
    assert any("symlink loop" in reason for _, reason in problems)


def test_draft_keeps_short_side():
    arr = np.random.default_rng(0).integers(0, 255, (400, 600, 3), dtype=np.uint8)
    img = decode_image(_jpeg_bytes(arr), draft_size=90)
    assert min(img.size) >= 90 and min(img.size) < 400


def test_a_file_reached_by_two_paths_is_listed_once(tmp_path):
    """Found by a bug hunt (2026-12-06): a symlink and its target were two items, so dedup
    called them copies of each other and could keep the link and drop the real file (the
    README's quarantine loop then left a dangling link). One file is one item: the real
    path is kept, the link reported, whatever the names' order."""
    (tmp_path / "a").mkdir()
    Image.new("RGB", (4, 4), "red").save(tmp_path / "a" / "zz_original.png")
    Image.new("RGB", (4, 4), "blue").save(tmp_path / "a" / "other.png")
    os.symlink("zz_original.png", tmp_path / "a" / "l.png")
    os.link(tmp_path / "a" / "other.png", tmp_path / "a" / "other_hard.png")
    outside = tmp_path.parent / (tmp_path.name + "_out.png")
    Image.new("RGB", (4, 4)).save(outside)
    os.symlink(outside, tmp_path / "a" / "from_outside.png")  # the only path to it: kept
    images, problems = discover_images(tmp_path)
    assert [f.path for f in images] == ["a/from_outside.png", "a/other.png",
                                        "a/zz_original.png"]
    assert sorted(problems) == [
        ("a/l.png", "the same file as a/zz_original.png (a link to it): listed once"),
        ("a/other_hard.png", "the same file as a/other.png (a link to it): listed once")]


def _tiff(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "TIFF")
    return buf.getvalue()


def test_float_images_are_scaled_by_their_range_and_nan_refused():
    """Found by a bug hunt (2026-12-06): a float (mode F) image in [0, 1] was clipped to
    0 .. 255 without scaling, so every such image embedded as solid black; a NaN pixel
    made the whole image saturate with a raw numpy warning."""
    rng = np.random.default_rng(1)
    unit = rng.random((8, 8)).astype(np.float32)
    got = np.asarray(decode_image(_tiff(unit)))[..., 0].astype(int)
    np.testing.assert_allclose(got, np.round(unit * 255), atol=1)
    signed = unit * 2 - 1  # [-1, 1]: by its range
    got = np.asarray(decode_image(_tiff(signed)))[..., 0].astype(int)
    want = (signed - signed.min()) / (signed.max() - signed.min()) * 255
    np.testing.assert_allclose(got, np.round(want), atol=1)
    wide = unit * 200  # already 0 .. 255: as it is
    got = np.asarray(decode_image(_tiff(wide)))[..., 0].astype(int)
    np.testing.assert_allclose(got, wide.astype(np.uint8), atol=1)
    bad = unit.copy()
    bad[0, 0] = np.nan
    with pytest.raises(DecodeError, match="not finite"):
        decode_image(_tiff(bad))


@pytest.mark.parametrize(
    ("pixels", "key"),
    [
        (np.array([[[255, 0, 255], [0, 128, 0], [255, 0, 255]]], "uint8").repeat(3, 0),
         (255, 0, 255)),  # RGB with a tRNS colour
        (np.array([[7, 200, 7]], "uint8").repeat(3, 0), 7),  # grey with a tRNS level
        (np.array([[700, 60000, 700]], "uint16").repeat(3, 0), 700),  # 16-bit grey
    ],
    ids=["RGB", "L", "I;16"],
)
def test_colour_key_transparency_is_over_white(pixels: np.ndarray, key: object) -> None:
    """A PNG whose transparency is a tRNS colour key (no alpha channel) is composited over
    white like an alpha or palette PNG (it kept the key colour: magenta, dark grey)."""
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG", transparency=key)
    data = buf.getvalue()
    assert "transparency" in Image.open(io.BytesIO(data)).info
    out = np.asarray(decode_image(data))
    assert (out[0, 0] == 255).all() and (out[:, 0] == 255).all()  # transparent: white
    assert not (out[1, 1] == 255).all()  # the opaque middle column keeps its colour
