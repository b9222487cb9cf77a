"""dedup --keep best between resized copies (lead's issue 20 follow-up): a shrunk copy was
kept over its original in 38 % of planted shrunk copies (docs/dedup.md). Resolution first:
the larger file is kept when it holds detail the smaller lacks, the smaller when the larger
is only its enlargement."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store_writer import write_store
from pairkit.mine.keep_resized import (
    REASON_SHRUNK,
    rekeep_groups,
    resize_losses,
    resize_verdict,
)

runner = CliRunner()


def digits(n: int, seed: int = 0) -> list[Image.Image]:
    """Digits drawn at 64 px as the demo draws them (smooth: the hard case)."""
    from sklearn.datasets import load_digits

    from pairkit.demo import digit_image

    rng = np.random.default_rng(seed)
    data = load_digits().images
    return [digit_image(data[i], 64, rng) for i in rng.choice(len(data), n, replace=False)]


def noise(seed: int = 0, side: int = 64) -> Image.Image:
    """1/f noise: detail up to the pixel."""
    rng = np.random.default_rng(seed)
    fy, fx = np.meshgrid(np.fft.fftfreq(side), np.fft.fftfreq(side), indexing="ij")
    f = np.hypot(fx, fy)
    f[0, 0] = 1
    chans = []
    for _ in range(3):
        img = np.real(np.fft.ifft2((rng.normal(size=f.shape) + 1j * rng.normal(size=f.shape))
                                   / f))
        chans.append((img - img.mean()) / (4 * img.std()) * 255 + 128)
    return Image.fromarray(np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8))


def test_resize_losses_by_hand() -> None:
    """A 2x2-block enlargement shrinks back exactly with the box filter (e_down = 0); a
    linear ramp enlarges back exactly with the bilinear filter inside its border."""
    small = np.random.default_rng(0).uniform(size=(16, 20))
    big = np.kron(small, np.ones((2, 2)))
    e_down, e_up = resize_losses(big, small)
    assert e_down == pytest.approx(0.0, abs=1e-12)
    assert e_up > 0.01  # the random blocks are not a smooth picture
    yy, xx = np.mgrid[0:32, 0:40]
    ramp_big = (0.3 * xx + 0.7 * yy) / 40.0
    ramp_small = np.asarray(Image.fromarray(ramp_big.astype(np.float32), "F").resize(
        (20, 16), Image.Resampling.BOX), dtype=np.float64)
    e_down, e_up = resize_losses(ramp_big, ramp_small)
    assert e_down < 1e-10 and e_up < 1e-3


@pytest.mark.parametrize("kind", ["digit", "noise"])
def test_verdicts_on_planted_copies(tmp_path: Path, kind: str) -> None:
    from PIL import ImageEnhance

    rng = np.random.default_rng(3)
    for k in range(6):
        img = digits(6, seed=k)[k] if kind == "digit" else noise(seed=k)
        w, h = img.size
        o = tmp_path / f"o{k}.png"
        img.save(o)
        f = rng.uniform(0.6, 0.8)
        shrunk = tmp_path / f"s{k}.png"
        img.resize((round(w * f), round(h * f)), Image.Resampling.BILINEAR).save(shrunk)
        up = tmp_path / f"u{k}.png"
        img.resize((w * 3 // 2, h * 3 // 2), Image.Resampling.BICUBIC).save(up)
        assert resize_verdict(o, shrunk) is True, (kind, k)
        assert resize_verdict(up, o) is False, (kind, k)
        # not a resize pair: the same size, another aspect, another picture, brightened
        bright = tmp_path / f"b{k}.png"
        ImageEnhance.Brightness(img).enhance(1.3).resize((w * 3 // 4, h * 3 // 4)).save(bright)
        crop = tmp_path / f"c{k}.png"
        img.crop((0, 0, w * 3 // 4, h // 2)).save(crop)
        other = tmp_path / f"x{k}.png"
        (digits(1, seed=100 + k)[0] if kind == "digit" else noise(seed=100 + k)).resize(
            (w // 2, h // 2)).save(other)
        assert resize_verdict(o, o) is None
        assert resize_verdict(o, crop) is None
        assert resize_verdict(o, other) is None
        assert resize_verdict(o, bright) is None


def test_rekeep_groups_rewrites_the_group() -> None:
    vectors = np.eye(4, dtype=np.float32)
    vectors[1] = vectors[0] * 0.6 + vectors[1] * 0.8
    table = pd.DataFrame({"group": [0, 0, 0, 1, 1], "id": [1, 0, 2, 3, 2],
                          "keep": [True, False, False, True, False],
                          "similarity": [1.0, 0.6, 1.0, 1.0, 0.0],
                          "match": ["keep", "near", "exact", "keep", "near"]})
    table = table.iloc[:4]  # group 1: id 3 alone with nothing else
    sha = np.array(["a", "b", "a", "c"], dtype=object)  # 0 and 2: the same file bytes
    out = rekeep_groups(table, vectors, sha, {0: 0})
    assert out["id"].tolist() == [0, 1, 2, 3]
    assert out["keep"].tolist() == [True, False, False, True]
    assert out["match"].tolist() == ["keep", "near", "exact", "keep"]
    np.testing.assert_allclose(out["similarity"], [1.0, 0.6, 1.0, 1.0], atol=1e-6)
    assert out["group"].tolist() == [0, 0, 0, 1]  # numbered by kept id, as before
    assert rekeep_groups(table, vectors, sha, {}) is table


def dedup_groups_of(tmp_path: Path, root: Path, paths: list[str], per: int,
                    *extra: str) -> pd.DataFrame:
    """`dedup`'s table of a store of ``paths`` under ``root`` whose vectors put each run
    of ``per`` consecutive paths in one group (and nothing else together)."""
    e = np.eye(len(paths) // per + 1, dtype=np.float32)
    rows = np.stack([e[i // per] + 0.01 * e[-1] * (i % per) for i in range(len(paths))])
    write_store(tmp_path / "store", rows, pd.DataFrame({"path": paths}), encoder={"name": "t"},
                dtype="float32", extra={"image_root": str(root)})
    r = runner.invoke(app, ["dedup", str(tmp_path / "store"), "-t", "0.99", "--method",
                            "threshold", *extra])
    assert r.exit_code == 0, r.output
    return pd.read_json(io.StringIO(r.stdout), lines=True)


def test_dedup_keeps_the_original_of_shrunk_and_enlarged_copies(tmp_path: Path) -> None:
    """12 demo digits, each with a shrunk copy (0.6-0.8x bilinear, as the demo plants
    them) and an enlarged one (1.5x bicubic), one group each: every original is kept."""
    root = tmp_path / "images"
    root.mkdir()
    rng = np.random.default_rng(1)
    paths = []
    for k, img in enumerate(digits(12, seed=1)):
        f = rng.uniform(0.6, 0.8)
        files = {f"d{k:02d}.png": img,
                 f"d{k:02d}-small.png": img.resize((round(64 * f), round(64 * f)),
                                                   Image.Resampling.BILINEAR),
                 f"d{k:02d}-big.png": img.resize((96, 96), Image.Resampling.BICUBIC)}
        for name, im in files.items():
            im.save(root / name)
        paths += list(files)
    t = dedup_groups_of(tmp_path, root, paths, 3)
    assert t["group"].nunique() == 12
    kept = t.loc[t["keep"], "path"].tolist()
    assert kept == [f"d{k:02d}.png" for k in range(12)]
    # the groups the per-file rule got wrong say why they changed
    reasons = t.loc[t["keep"], "keep_reason"].tolist()
    assert REASON_SHRUNK in reasons
    assert t.loc[t["keep"], "similarity"].tolist() == [1.0] * 12


def test_an_original_with_an_exif_orientation_is_kept_over_its_shrunk_copy(tmp_path: Path
                                                                           ) -> None:
    """Found by a bug hunt (2026-12-06): a camera original (landscape pixels, EXIF
    orientation 6) against its upright half-size copy was read unrotated, failed the aspect
    check and lost to the copy, which went to the drop list's keep."""
    root = tmp_path / "images"
    root.mkdir()
    rng = np.random.default_rng(0)
    paths = []
    for s in range(3):
        shown = Image.fromarray(rng.integers(0, 255, (40, 30, 3)).astype(np.uint8)).resize(
            (480, 640), Image.Resampling.NEAREST)
        shown.resize((240, 320), Image.Resampling.LANCZOS).save(root / f"p{s}_copy.jpg",
                                                              quality=95)
        exif = Image.Exif()
        exif[0x0112] = 6  # rotate 90 clockwise to display
        shown.transpose(Image.Transpose.ROTATE_90).save(root / f"p{s}_orig.jpg", quality=95,
                                                        exif=exif.tobytes())
        paths += [f"p{s}_copy.jpg", f"p{s}_orig.jpg"]
    t = dedup_groups_of(tmp_path, root, paths, 2)
    assert sorted(t.loc[t["keep"], "path"]) == [f"p{s}_orig.jpg" for s in range(3)]


def test_keep_largest_says_what_decided(tmp_path: Path) -> None:
    """Noticed in a bug hunt (2026-12-06): --keep largest said "largest image" when the
    file size decided, and when neither did (the lowest id)."""
    root = tmp_path / "images"
    root.mkdir()
    img = noise(3, 48)
    img.save(root / "a.png")
    img.resize((32, 32)).save(root / "b.png")  # fewer pixels
    img.save(root / "c.png", compress_level=9)
    img.save(root / "d.png", compress_level=0)  # same pixels, a larger file
    img.save(root / "e.png")
    img.save(root / "f.png")  # the same bytes
    t = dedup_groups_of(tmp_path, root, ["a.png", "b.png", "c.png", "d.png", "e.png",
                                         "f.png"], 2, "--keep", "largest")
    reasons = dict(zip(t.loc[t["keep"], "path"], t.loc[t["keep"], "keep_reason"],
                       strict=True))
    assert reasons == {"a.png": "largest image (most pixels)",
                       "d.png": "largest file (same pixels)",
                       "e.png": "same pixels and file size: lowest id"}


def test_a_stretched_copy_or_another_picture_changes_no_keeper(tmp_path: Path) -> None:
    """Mutation audit 4a (KR1, KR2): a copy resized to another aspect is not a resize pair
    (shrinking the original to its size gives it back exactly: only the aspect check
    tells), and a larger file that is no resize of the kept one does not replace it."""
    from pairkit.mine.keep_resized import resized_keeper

    img = digits(1, seed=5)[0]
    w, h = img.size
    o, stretched, other = tmp_path / "o.png", tmp_path / "s.png", tmp_path / "x.png"
    img.save(o)
    img.resize((w * 7 // 10, h * 6 // 10), Image.Resampling.BILINEAR).save(stretched)
    digits(1, seed=105)[0].resize((w * 3 // 2, h * 3 // 2)).save(other)
    assert resize_verdict(o, stretched) is None
    assert resize_verdict(other, o) is None
    files = {0: o, 1: other, 2: stretched}
    pixels = {0: float(w * h), 1: float(w * h * 9 / 4), 2: float(w * h * 0.42)}
    assert resized_keeper(0, [1], pixels.get, files.get) == (0, None)
    assert resized_keeper(2, [0], pixels.get, files.get) == (2, None)
