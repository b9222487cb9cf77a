"""Decoding: every kind of bad or unusual file gets a clear outcome."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

from pairkit.encode.images import (
    DecodeError,
    decode_image,
    discover_images,
    load_image,
    read_bytes,
)


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


def test_the_bomb_guard_holds_whatever_the_warnings_filters(monkeypatch):
    """Found by a bug hunt (2026-12-07): the guard made PIL's DecompressionBombWarning an
    error with warnings.catch_warnings, which is process-wide and not thread-safe; the
    report decodes thumbnails in a thread pool, where one thread leaving the block can
    drop another's filter, and an image of 1-2x the limit was decoded. Simulated: the
    filter never set (as another thread's exit would remove it)."""
    import warnings

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    data = _png_bytes(Image.new("RGB", (120, 120)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monkeypatch.setattr(warnings, "simplefilter", lambda *a, **k: None)
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


# every extension pairkit lists, as the format Pillow saves it in (defect: .jfif, .jpe, .avif,
# .jp2, .tga, .ico ... were skipped without a word though Pillow decodes them)
EXTENSIONS = {".jpg": "JPEG", ".jpeg": "JPEG", ".jpe": "JPEG", ".jfif": "JPEG", ".png": "PNG",
              ".apng": "PNG", ".gif": "GIF", ".webp": "WEBP", ".bmp": "BMP", ".dib": "DIB",
              ".tif": "TIFF", ".tiff": "TIFF", ".ppm": "PPM", ".pgm": "PPM", ".pbm": "PPM",
              ".pnm": "PPM", ".avif": "AVIF", ".jp2": "JPEG2000", ".j2k": "JPEG2000",
              ".jpx": "JPEG2000", ".jpf": "JPEG2000", ".jpc": "JPEG2000", ".j2c": "JPEG2000",
              ".tga": "TGA", ".ico": "ICO", ".qoi": "QOI", ".pcx": "PCX"}


def test_every_image_extension_pillow_decodes_here_is_found_and_decoded(tmp_path):
    from pairkit.encode.images import IMAGE_EXTENSIONS

    assert set(EXTENSIONS) == IMAGE_EXTENSIONS
    registered = Image.registered_extensions()
    arr = np.random.default_rng(0).integers(0, 255, (24, 32, 3), dtype=np.uint8)
    for ext, fmt in EXTENSIONS.items():
        assert registered[ext] == fmt, ext  # what Pillow opens it as here
        img = Image.fromarray(arr).convert("1" if ext == ".pbm" else "RGB")
        img.save(tmp_path / f"a{ext[1:]}{ext.upper()}", format=fmt)
    found, problems = discover_images(tmp_path)
    assert not problems and len(found) == len(EXTENSIONS)
    for f in found:
        out = decode_image(f.abs_path.read_bytes())
        assert out.mode == "RGB", f.path
        assert out.size == (32, 24) or f.path.endswith(".ICO"), f.path  # (icon sizes)


def test_tar_listing_and_the_no_images_message_use_the_same_extensions(tmp_path):
    import tarfile

    from pairkit.encode.embedder import EmbedConfig, embed_folder
    from pairkit.encode.images import IMAGE_EXTENSIONS
    from pairkit.encode.webdataset import list_members
    from pairkit.errors import PairkitError

    data = _jpeg_bytes(np.zeros((8, 8, 3), np.uint8))
    with tarfile.open(tmp_path / "s.tar", "w") as tf:
        for name in ("a.jfif", "b.jpe", "c.txt"):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    files, _, _ = list_members(tmp_path / "s.tar", "s.tar")
    assert [f.path for f in files] == ["s.tar/a.jfif", "s.tar/b.jpe"]
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "a.txt").write_text("not an image")
    with pytest.raises(PairkitError, match="no images found") as info:
        embed_folder(EmbedConfig(images=tmp_path / "none", store=tmp_path / "st",
                                 model="pixels"))
    assert all(ext in str(info.value) for ext in IMAGE_EXTENSIONS)


def test_docs_list_the_image_extensions():
    import re
    from pathlib import Path

    from pairkit.encode.images import IMAGE_EXTENSIONS

    text = " ".join((Path(__file__).parents[2] / "docs" / "embed.md").read_text().split())
    listed = re.search(r"the image extensions are `([^`]+)`", text)
    assert listed and set(listed[1].split()) == IMAGE_EXTENSIONS


def test_twelve_bit_and_unit_float_images_at_their_bounds():
    """A 12-bit grey image (at most 4,095) is scaled by its own top, not as 16-bit (which
    made it near black); a float image whose top is exactly 1.0 is a [0, 1] image
    (hunt 3b: both bounds moved survived: every test image was far from them). Values by
    hand: 4000 -> 255, 1000 -> 1000 / 4000 * 255 = 63.75 -> 63; 0.5 -> 127.5 -> 127."""
    twelve = Image.fromarray(np.array([[0, 1000, 4000]], dtype=np.uint16))
    got = np.asarray(decode_image(_png_bytes(twelve)))[..., 0].tolist()
    assert got == [[0, 63, 255]]
    unit = np.array([[0.0, 0.5, 1.0]], dtype=np.float32)
    assert np.asarray(decode_image(_tiff(unit)))[..., 0].tolist() == [[0, 127, 255]]


def test_an_item_path_out_of_the_image_root_is_never_opened(tmp_path) -> None:
    """read_item_bytes (report thumbnails, train's pair images) refuses absolute and '..'
    paths before touching the file system, and applies --max-file-bytes to plain files
    and tar members alike."""
    import tarfile

    from pairkit.encode.item_images import read_item_bytes
    from pairkit.errors import PairkitError

    root = tmp_path / "images"
    root.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"secret")
    (root / "a.png").write_bytes(b"0123456789")
    with tarfile.open(root / "s.tar", "w") as tf:
        tf.add(root / "a.png", arcname="m.png")
    assert read_item_bytes(root, "a.png") == b"0123456789"
    assert read_item_bytes(root, "s.tar/m.png") == b"0123456789"
    for bad, why in (("../secret.bin", "holds '..'"),
                     (str(tmp_path / "secret.bin"), "is absolute")):
        with pytest.raises(PairkitError, match=f"item path .* {why}.*: not opened"):
            read_item_bytes(root, bad)
    assert read_item_bytes(root, "a.png", max_bytes=10) == b"0123456789"
    for item in ("a.png", "s.tar/m.png"):
        with pytest.raises(PairkitError, match="too large"):
            read_item_bytes(root, item, max_bytes=9)


def test_remote_image_reasons_match_the_local_reader(monkeypatch) -> None:
    """An object on object storage that is empty, too large, gone or unreadable gets the
    reason a local file would (the object store's read faked)."""
    import pairkit.core.remote as remote
    from pairkit.encode.remote_images import read_remote_image
    from pairkit.errors import PairkitError

    answers = {
        "s3://b/empty.png": b"",
        "s3://b/big.png": PairkitError("s3://b/big.png is 2,000 bytes, more than 1,000"),
        "s3://b/gone.png": FileNotFoundError("gone"),
        "s3://b/denied.png": PairkitError("access denied"),
        "s3://b/ok.png": b"png bytes",
    }

    def fake(url, max_bytes):  # noqa: ANN001, ANN202
        got = answers[url]
        if isinstance(got, Exception):
            raise got
        return got

    monkeypatch.setattr(remote, "read_bytes", fake)
    assert read_remote_image("s3://b/ok.png", 1000) == b"png bytes"
    for url, why in (("s3://b/empty.png", "empty file (0 bytes)"),
                     ("s3://b/big.png", "file too large (2,000 bytes > --max-file-bytes 1,000)"),
                     ("s3://b/gone.png", "object vanished during the run"),
                     ("s3://b/denied.png", "unreadable: access denied")):
        with pytest.raises(DecodeError) as info:
            read_remote_image(url, 1000)
        assert str(info.value) == why


def test_a_file_one_byte_past_max_file_bytes_is_refused_by_its_size(tmp_path):
    f = tmp_path / "a.png"
    f.write_bytes(b"x" * 6)
    assert read_bytes(f, max_bytes=6) == b"x" * 6
    with pytest.raises(DecodeError, match=r"^file too large \(6 bytes > --max-file-bytes 5\)$"):
        read_bytes(f, max_bytes=5)
