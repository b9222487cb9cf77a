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
