"""The device pipeline (--decode gpu) against the PIL path, on the CPU: torchvision's CPU
JPEG decoder feeds the same torch code that runs after nvjpeg on CUDA.

Stated tolerances (docs/embed.md): pixels of view 0 within 1 level where PIL decodes at
full size, mean absolute difference under 1 level for every view; vectors of every
encoder with a cosine of at least 0.99 to the PIL path's (0.995 for view 0)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter

from pairkit.core.store import Store
from pairkit.encode.device_pipeline import check_decode, on_device
from pairkit.encode.device_views import (
    draft_scale,
    drafted,
    render_views_torch,
    resample_weights,
    resize,
)
from pairkit.encode.embedder import EmbedConfig, embed_folder
from pairkit.encode.images import decode_image
from pairkit.encode.jpeg import inspect_jpeg
from pairkit.encode.registry import Preprocess
from pairkit.encode.views import render_views
from pairkit.errors import UsageError


def photo(w: int, h: int, seed: int = 0, **save: object) -> bytes:
    """A smooth photo-like JPEG (quality 90 unless told)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, (max(1, h // 16), max(1, w // 16), 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.Resampling.BILINEAR)
    img = img.filter(ImageFilter.GaussianBlur(1))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", **({"quality": 90} | save))
    return buf.getvalue()


def torch_decode(data: bytes) -> torch.Tensor:
    from torchvision.io import ImageReadMode, decode_jpeg

    return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                       mode=ImageReadMode.RGB)


# -- which files may skip PIL ------------------------------------------------------------
def test_plain_jpegs_are_recognised() -> None:
    assert inspect_jpeg(photo(40, 30)).plain
    assert inspect_jpeg(photo(40, 30, progressive=True)).plain
    grey = io.BytesIO()
    Image.new("L", (20, 10), 90).save(grey, format="JPEG")
    info = inspect_jpeg(grey.getvalue())
    assert info.plain and (info.width, info.height, info.components) == (20, 10, 1)


def _exif_jpeg(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    Image.new("RGB", (20, 10), (200, 10, 10)).save(buf, format="JPEG", exif=exif.tobytes())
    return buf.getvalue()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: _exif_jpeg(6), "EXIF orientation 6"),
        (lambda: photo(40, 30)[:-300], "no end-of-image marker"),
        (lambda: b"\x89PNG\r\n\x1a\n" + b"0" * 40, "not a JPEG"),
        (lambda: b"", "not a JPEG"),
    ],
)
def test_other_files_keep_the_pil_path(make, why: str) -> None:  # noqa: ANN001
    info = inspect_jpeg(make())
    assert not info.plain and why in info.why


def test_cmyk_and_bombs_keep_the_pil_path() -> None:
    buf = io.BytesIO()
    Image.new("CMYK", (20, 10), (0, 50, 100, 0)).save(buf, format="JPEG")
    assert "4 components" in inspect_jpeg(buf.getvalue()).why
    assert inspect_jpeg(_exif_jpeg(1)).plain  # orientation 1 changes nothing
    big = photo(64, 48)
    assert "decompression-bomb" in inspect_jpeg(big, max_pixels=1000).why


def _xmp_jpeg(xmp_orientation: int, exif_orientation: int | None = None) -> bytes:
    """A picture whose orientation is in an XMP packet (and in EXIF when told)."""
    xmp = ('<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:'
           'meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:'
           'Description rdf:about="" xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:'
           f'Orientation="{xmp_orientation}"/></rdf:RDF></x:xmpmeta><?xpacket end="w"?>')
    save: dict[str, object] = {"xmp": xmp.encode()}
    if exif_orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        save["exif"] = exif.tobytes()
    img = Image.open(io.BytesIO(photo(80, 60, seed=4)))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=95, **save)
    return buf.getvalue()


@pytest.mark.parametrize(("xmp", "exif"), [(6, None), (8, None), (1, None), (6, 1), (1, 6)])
def test_xmp_orientation_is_pils(xmp: int, exif: int | None) -> None:
    """Pillow's getexif() takes tiff:Orientation from XMP when EXIF has none, and
    decode_image rotates by it: such a file is not plain (it was decoded unrotated on the
    device, cosine 0.15 to the PIL path's vector)."""
    data = _xmp_jpeg(xmp, exif)
    rotates = Image.open(io.BytesIO(data)).getexif().get(0x0112, 1) != 1
    info = inspect_jpeg(data)
    assert info.plain is not rotates, (xmp, exif, info)
    if rotates and exif is None:
        assert info.why == f"XMP orientation {xmp}"


def test_embed_decode_gpu_of_an_xmp_rotated_jpeg(tmp_path: Path) -> None:
    root = tmp_path / "img"
    root.mkdir()
    (root / "xmp_rot.jpg").write_bytes(_xmp_jpeg(6))
    (root / "plain.jpg").write_bytes(photo(80, 60, seed=4))
    vectors = []
    for decode in ("cpu", "gpu"):
        embed_folder(EmbedConfig(images=root, store=tmp_path / decode, model="pixels",
                                 views=1, device="cpu", decode=decode, batch_size=4,
                                 workers=0, dtype="float32"))
        vectors.append(Store.open(tmp_path / decode).vectors())
    assert np.einsum("nd,nd->n", *vectors).min() >= 0.995


def test_thin_jpegs_keep_the_pil_path() -> None:
    """A 3 x 9000 JPEG built a 192000 x 9000 resampling matrix on the device path (21 GB,
    113 s; 1 x 20000 ended the run "out of memory"): over 8:1 it is PIL's, whose view 0
    resamples only the centre box."""
    for w, h in [(9000, 3), (3, 9000), (20000, 1), (900, 100)]:
        info = inspect_jpeg(photo(w, h))
        assert not info.plain and "longer than wide" in info.why, (w, h, info)
    assert inspect_jpeg(photo(800, 100)).plain and inspect_jpeg(photo(100, 800)).plain


def test_embed_decode_gpu_of_thin_jpegs(tmp_path: Path) -> None:
    root = tmp_path / "img"
    root.mkdir()
    (root / "wide.jpg").write_bytes(photo(3000, 3, seed=1))
    (root / "tall.jpg").write_bytes(photo(2, 900, seed=2))
    (root / "photo.jpg").write_bytes(photo(400, 300, seed=3))
    stores = {}
    for decode in ("cpu", "gpu"):
        summary = embed_folder(EmbedConfig(images=root, store=tmp_path / decode,
                                           model="pixels", views=2, device="cpu",
                                           decode=decode, batch_size=4, workers=0,
                                           dtype="float32"))
        assert summary.images == 3
        stores[decode] = (Store.open(tmp_path / decode), summary)
    (a, _), (b, sb) = stores["cpu"], stores["gpu"]
    assert sb.decoded_on_device == 1  # the photo; the strips went the PIL path
    assert np.einsum("nd,nd->n", a.vectors(), b.vectors()).min() >= 0.995


# -- the pieces against PIL --------------------------------------------------------------
def test_draft_scale_is_pils() -> None:
    for w, h in [(400, 300), (1200, 900), (4000, 3000), (3000, 4500), (500, 449), (100, 80)]:
        img = Image.open(io.BytesIO(photo(w, h)))
        short = min(w, h)
        if short > 448:
            scale = short / 448
            img.draft("RGB", (int(w / scale) + 1, int(h / scale) + 1))
        a = draft_scale(w, h, 448)
        assert img.size == ((w + a - 1) // a, (h + a - 1) // a), (w, h)


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear", "lanczos"])
def test_resize_is_pils(interpolation: str) -> None:
    from pairkit.encode.views import pil_resample

    rng = np.random.default_rng(1)
    arr = rng.integers(0, 256, (57, 83, 3), dtype=np.uint8)
    x = torch.from_numpy(arr).permute(2, 0, 1).float()
    for (w, h, box) in [(31, 20, None), (120, 90, None), (40, 40, (10, 5, 70, 50))]:
        ref = np.asarray(Image.fromarray(arr).resize((w, h), pil_resample(interpolation), box=box))
        got = resize(x, w, h, interpolation, box=box).permute(1, 2, 0).numpy()
        diff = np.abs(ref.astype(int) - got.astype(int))
        assert diff.max() <= 1 and diff.mean() < 0.3, (interpolation, w, h, box)


def test_resample_weights_rows_sum_to_one() -> None:
    w = resample_weights(300, 12.0, 250.0, 224, "bicubic")
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    assert w[:, 10:12].any() and not w[:, :10].any()  # taps reach past the box, as in PIL


PRE = [Preprocess(size=224, interpolation="bicubic"), Preprocess(size=64,
                                                                  interpolation="bilinear")]
# timm's eval transforms (hunt-u 6): crop_pct centre crop, squash, border (mean padding)
PRE_TIMM = [Preprocess(size=64, interpolation="bicubic", crop_pct=0.875),
            Preprocess(size=64, interpolation="bilinear", resize="squash", crop_pct=0.9),
            Preprocess(size=64, mean=(0.5, 0.4, 0.3), resize="border", crop_pct=0.9)]


@pytest.mark.parametrize("pre", PRE + PRE_TIMM, ids=["224-bicubic", "64-bilinear", "timm-crop",
                                                     "timm-squash", "timm-border"])
@pytest.mark.parametrize("size", [(400, 300), (300, 400), (1200, 900), (230, 225), (90, 60)])
def test_views_match_the_pil_path(pre: Preprocess, size: tuple[int, int]) -> None:
    data = photo(*size, seed=sum(size))
    ref = render_views(decode_image(data, draft_size=2 * pre.size), "a/b.jpg", 4, pre, 3)
    img = drafted(torch_decode(data), 2 * pre.size)
    got = render_views_torch(img, "a/b.jpg", 4, pre, 3).numpy()
    assert got.shape == ref.shape and got.dtype == np.uint8
    diff = np.abs(ref.astype(int) - got.astype(int))
    if draft_scale(*size, 2 * pre.size) == 1:
        assert diff[0].max() <= 1  # view 0 of a full-size decode: PIL's to one level
    assert diff.reshape(4, -1).mean(axis=1).max() < 1.0


# -- whole runs: same store, same errors, vectors within tolerance -----------------------
def _folder(root: Path) -> None:
    root.mkdir()
    for i, (w, h) in enumerate([(400, 300), (300, 400), (1000, 700), (64, 48), (250, 260)]):
        (root / f"p{i}.jpg").write_bytes(photo(w, h, seed=i))
    (root / "prog.jpg").write_bytes(photo(200, 150, seed=9, progressive=True))
    Image.new("RGB", (40, 30), (10, 200, 30)).save(root / "flat.png")
    (root / "rotated.jpg").write_bytes(_exif_jpeg(6))
    (root / "cut.jpg").write_bytes(photo(300, 200, seed=5)[:900])
    (root / "empty.jpg").write_bytes(b"")
    (root / "junk.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg \xff\xd9")


def _embed(images: Path, out: Path, decode: str, model: str, views: int) -> tuple[Store, object]:
    # (pixels has no weights: a tag for it is refused)
    pretrained = None if model == "pixels" else "none"
    summary = embed_folder(EmbedConfig(images=images, store=out, model=model,
                                       pretrained=pretrained, views=views, device="cpu",
                                       decode=decode, batch_size=6, workers=0,
                                       dtype="float32"))
    assert summary.images == 8  # 6 JPEGs for the device, a PNG and a rotated JPEG for PIL
    return Store.open(out), summary


@pytest.mark.parametrize("model", ["pixels", "openclip/pairkit-tiny-clip"])
def test_embed_decode_gpu_on_cpu_matches_pil(tmp_path: Path, model: str) -> None:
    if model.startswith("openclip"):
        import open_clip

        open_clip.add_model_config(Path(__file__).parent / "data" / "pairkit-tiny-clip.json")
    _folder(tmp_path / "img")
    a, sa = _embed(tmp_path / "img", tmp_path / "pil", "cpu", model, 3)
    b, sb = _embed(tmp_path / "img", tmp_path / "dev", "gpu", model, 3)
    assert sa.decoded_on_device == 0 and sb.decoded_on_device == 6  # 5 + the progressive
    assert a.items.drop(columns="id").equals(b.items.drop(columns="id"))
    errors_a = a.read_errors()
    errors_b = b.read_errors()
    assert errors_a == errors_b and len(errors_a) == 3
    assert {e["path"] for e in errors_b} == {"cut.jpg", "empty.jpg", "junk.jpg"}
    cos = np.einsum("nd,nd->n", a.vectors(), b.vectors())
    views = a.items["view"].to_numpy()
    assert cos.min() >= 0.99, cos.min()
    assert cos[views == 0].min() >= 0.995


def test_decode_option_words() -> None:
    assert check_decode("gpu") == "gpu"
    with pytest.raises(UsageError, match="--decode must be one of auto, cpu, gpu, got nvjpeg"):
        check_decode("nvjpeg")
    assert on_device("auto", "cuda:1") and not on_device("auto", "cpu")
    assert on_device("gpu", "cpu") and not on_device("cpu", "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (the GPU suite runs this)")
def test_nvjpeg_path_matches_pil_within_tolerance(tmp_path: Path) -> None:
    """The real device path (nvjpeg + torch on CUDA) against PIL on the CPU."""
    _folder(tmp_path / "img")
    summary_a = embed_folder(EmbedConfig(images=tmp_path / "img", store=tmp_path / "pil",
                                         model="pixels", views=3, device="cpu", decode="cpu",
                                         batch_size=6, workers=0, dtype="float32"))
    summary_b = embed_folder(EmbedConfig(images=tmp_path / "img", store=tmp_path / "gpu",
                                         model="pixels", views=3, device="cuda", decode="gpu",
                                         batch_size=6, dtype="float32"))
    assert summary_a.images == summary_b.images == 8, (summary_a, summary_b)
    assert summary_b.decoded_on_device == 6, summary_b
    a, b = Store.open(tmp_path / "pil"), Store.open(tmp_path / "gpu")
    ia, ib = a.items.drop(columns="id"), b.items.drop(columns="id")
    assert ia.equals(ib), (ia.compare(ib) if ia.shape == ib.shape else (ia, ib))
    cos = np.einsum("nd,nd->n", a.vectors(), b.vectors())
    views = a.items["view"].to_numpy()
    per_row = list(zip(a.items["path"], views, cos.round(5), strict=True))
    assert cos.min() >= 0.99 and cos[views == 0].min() >= 0.995, per_row


# -- the batched renderer against the per-image path (issue 24) ---------------------------
def _batch_images(pre: Preprocess) -> tuple[list[torch.Tensor], list[str]]:
    """Drafted decodes of JPEGs of several sizes: two of 400x300 and two of 300x400 (so
    both pass orders run batched), a tall one, a small one, a large one (drafted)."""
    sizes = [(400, 300), (400, 300), (300, 400), (300, 400), (200, 520), (90, 60),
             (1200, 900)]
    images = [drafted(torch_decode(photo(w, h, seed=i)), 2 * pre.size)
              for i, (w, h) in enumerate(sizes)]
    return images, [f"d/{i}.jpg" for i in range(len(sizes))]


@pytest.mark.parametrize("pre", PRE + PRE_TIMM, ids=["224-bicubic", "64-bilinear", "timm-crop",
                                                     "timm-squash", "timm-border"])
@pytest.mark.parametrize("views", [1, 4])
def test_batched_views_equal_the_per_image_path(pre: Preprocess, views: int) -> None:
    """Same crops, flips and jitter from the same seed: view 0 bit for bit; views 1.. at
    most one level apart, on under 0.1% of the pixels (float summation order of the batched
    matrix products against one product per view, before each 8-bit rounding)."""
    from pairkit.encode.device_views import render_batch

    images, sources = _batch_images(pre)
    got = render_batch(images, sources, views, pre, seed=7).numpy().astype(int)
    want = np.concatenate([render_views_torch(img, src, views, pre, 7).numpy()
                           for img, src in zip(images, sources, strict=True)]).astype(int)
    assert got.shape == want.shape == (len(images) * views, 3, pre.size, pre.size)
    diff = np.abs(got - want).reshape(len(images), views, -1)
    assert diff[:, 0].max() == 0
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, ((diff > 0).mean(), diff.max())


def test_batched_draft_equals_one_by_one() -> None:
    from pairkit.encode.device_views import drafted_batch

    decoded = [torch_decode(photo(w, h, seed=i)) for i, (w, h) in
               enumerate([(1200, 900), (1200, 900), (400, 300), (2000, 1100)])]
    for a, b in zip(drafted_batch(decoded, 448), [drafted(d, 448) for d in decoded],
                    strict=True):
        assert torch.equal(a, b)


def test_pipeline_batches_equal_one_prepare_per_batch(tmp_path: Path) -> None:
    """Reading one batch ahead changes nothing: the batches equal one ``prepare`` each
    (files read there), PIL-path files and errors in their places."""
    from pairkit.encode.device_pipeline import DevicePipeline
    from pairkit.encode.images import discover_images

    _folder(tmp_path / "img")
    files, _ = discover_images(tmp_path / "img")
    pre = Preprocess(size=64, interpolation="bicubic")
    idx = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    with DevicePipeline(files, 2, pre, 3, "cpu", readers=2) as pipe:
        ahead = list(pipe.batches(idx))
        one = [pipe.prepare(i) for i in idx]
    for a, b in zip(ahead, one, strict=True):
        assert a.ok == b.ok and a.errors == b.errors and a.on_device == b.on_device
        assert torch.equal(a.pixels, b.pixels)
    assert sum(len(p.ok) for p in ahead) == 8 and sum(len(p.errors) for p in ahead) == 3


def _adobe_jpeg(transform: int) -> bytes:
    """photo() with its JFIF segment (which says YCbCr) replaced by an Adobe APP14 one:
    ``transform`` 0 says the samples are RGB, 1 that they are YCbCr."""
    seg = b"Adobe" + b"\x00\x64" + b"\x00\x00" + b"\x00\x00" + bytes([transform])
    data = photo(40, 30)
    assert data[2:4] == b"\xff\xe0"  # JFIF APP0 first, as PIL writes it
    rest = data[4 + int.from_bytes(data[4:6], "big"):]
    return data[:2] + b"\xff\xee" + (len(seg) + 2).to_bytes(2, "big") + seg + rest


def test_an_adobe_rgb_jpeg_keeps_the_pil_path() -> None:
    """Samples stored as RGB (Adobe transform 0): PIL reads them without the YCbCr
    conversion, the device decoder would convert them; such a file keeps the PIL path
    (hunt 3b: dropping the check survived: no test had an Adobe segment)."""
    rgb, ycc = _adobe_jpeg(0), _adobe_jpeg(1)
    assert not np.array_equal(np.asarray(Image.open(io.BytesIO(rgb))),
                              np.asarray(Image.open(io.BytesIO(ycc))))
    info = inspect_jpeg(rgb)
    assert not info.plain and info.why == "Adobe RGB transform"
    assert inspect_jpeg(ycc).plain


def test_an_exif_block_too_short_to_read_keeps_the_pil_path() -> None:
    """An EXIF block whose IFD0 is cut short (the orientation can't be read): the file
    keeps the PIL path, which decides, not the device decoder, which would ignore it
    (hunt 3b: taking the unreadable orientation as none survived)."""
    tiff = b"II*\x00" + (8).to_bytes(4, "little") + (3).to_bytes(2, "little") + b"\x12\x01"
    seg = b"Exif\x00\x00" + tiff
    data = photo(40, 30)
    cut = data[:2] + b"\xff\xe1" + (len(seg) + 2).to_bytes(2, "big") + seg + data[2:]
    info = inspect_jpeg(cut)
    assert not info.plain and info.why == "EXIF orientation 0"


def test_pipeline_refuses_files_over_max_file_bytes(tmp_path: Path) -> None:
    """--max-file-bytes holds on the device path: a larger file is an error with the
    reader's reason, a smaller one is embedded."""
    from pairkit.encode.device_pipeline import DevicePipeline
    from pairkit.encode.images import discover_images

    (tmp_path / "img").mkdir()
    small, big = photo(16, 16, seed=1), photo(400, 300, seed=2)
    assert len(small) < 2000 < len(big)
    (tmp_path / "img" / "a.jpg").write_bytes(small)
    (tmp_path / "img" / "b.jpg").write_bytes(big)
    files, _ = discover_images(tmp_path / "img")
    pre = Preprocess(size=16, interpolation="bicubic")
    with DevicePipeline(files, 1, pre, 0, "cpu", readers=1, max_bytes=2000) as pipe:
        got = pipe.prepare([0, 1])
    assert [i for i, _ in got.ok] == [0]
    assert got.errors == [(1, f"file too large ({len(big):,} bytes > --max-file-bytes 2,000)")]


def test_pipeline_keeps_the_bomb_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JPEG over PIL's pixel limit goes the PIL path on the device pipeline too, and is
    refused there as a decompression bomb (not decoded on the device)."""
    from PIL import Image as PILImage

    from pairkit.encode.device_pipeline import DevicePipeline
    from pairkit.encode.images import discover_images

    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.jpg").write_bytes(photo(16, 16, seed=1))
    (tmp_path / "img" / "b.jpg").write_bytes(photo(64, 48, seed=2))
    files, _ = discover_images(tmp_path / "img")
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 1000)  # 64 x 48 is over twice this
    pre = Preprocess(size=16, interpolation="bicubic")
    with DevicePipeline(files, 1, pre, 0, "cpu", readers=1) as pipe:
        got = pipe.prepare([0, 1])
    assert [i for i, _ in got.ok] == [0] and got.on_device == 1
    assert len(got.errors) == 1 and got.errors[0][0] == 1
    assert got.errors[0][1].startswith("decompression bomb refused")


def test_a_jpeg_the_device_decoder_rejects_is_tried_by_pil_not_lost(tmp_path: Path) -> None:
    """A plain-looking JPEG whose scan holds a second SOF marker fails torchvision's
    decoder (the whole batch, then alone): it goes the PIL path, so it is a row or an
    error, never silently dropped; the good file of its batch is decoded on the device."""
    from pairkit.encode.device_pipeline import DevicePipeline
    from pairkit.encode.images import discover_images
    from pairkit.encode.jpeg import inspect_jpeg

    good = photo(64, 48, seed=2)
    sos = good.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(good[sos + 2:sos + 4], "big")
    bad = good[:start + 5] + b"\xff\xff\xff\xff\xc9" + good[start + 10:]
    assert inspect_jpeg(bad).plain
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.jpg").write_bytes(good)
    (tmp_path / "img" / "b.jpg").write_bytes(bad)
    files, _ = discover_images(tmp_path / "img")
    pre = Preprocess(size=16, interpolation="bicubic")
    with DevicePipeline(files, 1, pre, 0, "cpu", readers=1) as pipe:
        got = pipe.prepare([0, 1])
    assert got.on_device == 1 and got.ok[0][0] == 0
    assert sorted([i for i, _ in got.ok] + [i for i, _ in got.errors]) == [0, 1]
