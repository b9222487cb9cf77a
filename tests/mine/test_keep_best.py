"""dedup --keep best's signals (pairkit.mine.keep_best) on hand-made images."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from pairkit.mine.keep_best import best_key, copy_facts, keep_reason, sharpness


def test_sharpness_by_hand():
    # one bright pixel in a 5x5 zero image. The Laplacian at rows/cols 1..3 (none of them
    # next to a JPEG block edge, 0 or 7 mod 8, so all 9 count): 4 at the centre, -1 at its
    # 4 neighbours, 0 at the corners
    g = np.zeros((5, 5))
    g[2, 2] = 1.0
    expected = (16 + 4 * 1) / 9 / g.var()
    assert sharpness(g) == pytest.approx(expected)
    assert sharpness(np.ones((5, 5))) == 0.0


@pytest.mark.parametrize("quality", [40, 60, 75, 90, 95])
def test_jpeg_quality_is_read_back(tmp_path, quality):
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(
        tmp_path / "a.jpg", quality=quality)
    facts = copy_facts(tmp_path / "a.jpg")
    assert facts.lossy and abs(facts.quality - quality) <= 1
    Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    png = copy_facts(tmp_path / "a.png")
    assert not png.lossy and png.quality == 100 and png.quality_band == 2


def test_clipped_share_and_unreadable(tmp_path):
    a = np.full((10, 10, 3), 128, np.uint8)
    a[:5] = 255  # half the values at 255
    Image.fromarray(a).save(tmp_path / "a.png")
    assert copy_facts(tmp_path / "a.png").clipped == pytest.approx(0.5)
    (tmp_path / "b.png").write_bytes(b"nope")
    assert copy_facts(tmp_path / "b.png") is None
    assert copy_facts(tmp_path / "missing.png") is None


def test_reasons(tmp_path):
    rng = np.random.default_rng(1)
    img = Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8))
    img.save(tmp_path / "o.png")
    img.save(tmp_path / "j.jpg", quality=50)
    img.resize((20, 20)).save(tmp_path / "s.png")
    o, j, s = (copy_facts(tmp_path / n) for n in ("o.png", "j.jpg", "s.png"))
    assert best_key(o) > best_key(j) and best_key(o) > best_key(s)
    assert keep_reason(o, j) == "lossless"
    assert keep_reason(o, s) == "more pixels"
    assert keep_reason(o, o) == "same image: shortest path"
    assert keep_reason(o, None) == "only readable copy"


def test_sharpness_leaves_out_both_sides_of_every_block_edge():
    """sharpness against a plain loop: the 4-neighbour Laplacian's mean square over the
    image's variance, at the inner positions whose row and column are not 7 or 0 mod 8
    (the two sides of a JPEG block edge), on a 20 x 20 random image (rows and columns 7,
    8 and 15, 16 left out)."""
    g = np.random.default_rng(3).random((20, 20))
    kept = []
    for y in range(1, 19):
        for x in range(1, 19):
            if y % 8 in (7, 0) or x % 8 in (7, 0):
                continue
            lap = 4 * g[y, x] - g[y - 1, x] - g[y + 1, x] - g[y, x - 1] - g[y, x + 1]
            kept.append(lap ** 2)
    assert len(kept) == 14 * 14
    assert sharpness(g) == pytest.approx(np.mean(kept) / g.var(), rel=1e-12)


def test_clipped_counts_channel_values(tmp_path):
    a = np.full((10, 10, 3), 128, np.uint8)
    a[..., 0] = 255  # one channel of every pixel at 255: a third of the values
    Image.fromarray(a).save(tmp_path / "a.png")
    assert copy_facts(tmp_path / "a.png").clipped == pytest.approx(1 / 3)


def facts(**kw):  # noqa: ANN003, ANN201
    from pairkit.mine.keep_best import CopyFacts

    base = dict(pixels=1024.0, bytes=5000.0, lossy=False, quality=100.0, native_scale=1.0,
                sharpness=1.0, clipped=0.0)
    return CopyFacts(**{**base, **kw})


def test_quality_bands_at_their_edges():
    assert [facts(lossy=True, quality=q).quality_band for q in (100, 90, 89.9, 75, 74.9)] \
        == [2, 2, 1, 1, 0]


def test_best_key_order_quality_band_then_detail_then_bytes():
    """The band decides before any detail: a lossless file of a quarter the pixels and
    half the sharpness beats a JPEG of quality 60; within a band, detail (more pixels,
    fewer clipped values) decides, then the file's size."""
    png = facts(pixels=256.0, sharpness=0.5)
    jpeg = facts(lossy=True, quality=60.0, pixels=1024.0, sharpness=1.0, bytes=9000.0)
    assert png.detail < jpeg.detail and best_key(png) > best_key(jpeg)
    assert keep_reason(png, jpeg) == "lossless"
    q95 = facts(lossy=True, quality=95.0)
    assert best_key(q95) > best_key(jpeg) and keep_reason(q95, jpeg) == "higher JPEG quality"
    clean, clipped = facts(clipped=0.0), facts(clipped=0.25)
    assert clean.detail - clipped.detail == pytest.approx(8 * 0.25)
    assert best_key(clean) > best_key(clipped)
    assert keep_reason(clean, clipped) == "fewer clipped pixels"
    big, small = facts(bytes=6000.0), facts(bytes=5000.0)
    assert best_key(big) > best_key(small) and keep_reason(big, small) == "larger file"
