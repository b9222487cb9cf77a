"""Views: reproducible from (seed, source, view), whatever the batch or run."""

from __future__ import annotations

import numpy as np
from PIL import Image

from pairkit.encode.registry import Preprocess
from pairkit.encode.views import crop_box, plain_view, render_views, view_rng

PRE = Preprocess(size=16, interpolation="bilinear")


def _img(seed: int = 0) -> Image.Image:
    arr = np.random.default_rng(seed).integers(0, 255, (40, 60, 3), dtype=np.uint8)
    return Image.fromarray(arr)


def test_same_seed_same_views_different_seed_different():
    a = render_views(_img(), "x.jpg", 3, PRE, seed=1)
    b = render_views(_img(), "x.jpg", 3, PRE, seed=1)
    c = render_views(_img(), "x.jpg", 3, PRE, seed=2)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[0], c[0])  # view 0 is the plain image
    assert not np.array_equal(a[1], c[1])


def test_view_zero_is_plain_and_independent_of_view_count():
    one = render_views(_img(), "x.jpg", 1, PRE, seed=0)
    three = render_views(_img(), "x.jpg", 3, PRE, seed=0)
    np.testing.assert_array_equal(one[0], three[0])
    np.testing.assert_array_equal(one[0], np.asarray(plain_view(_img(), PRE)).transpose(2, 0, 1))
    assert three.shape == (3, 3, 16, 16) and three.dtype == np.uint8


def test_view_depends_on_source_not_order():
    r1 = view_rng(0, "a.jpg", 1).uniform()
    view_rng(0, "b.jpg", 1).uniform()
    assert view_rng(0, "a.jpg", 1).uniform() == r1
    assert view_rng(0, "b.jpg", 1).uniform() != r1


def test_crop_box_area_and_bounds():
    from pairkit.encode.views import Augment

    rng = np.random.default_rng(0)
    for _ in range(200):
        left, top, right, bottom = crop_box(60, 40, rng, Augment())
        assert 0 <= left < right <= 60 and 0 <= top < bottom <= 40
        assert (right - left) * (bottom - top) >= 0.3 * 60 * 40


def test_plain_view_centre_crop():
    arr = np.zeros((20, 40, 3), dtype=np.uint8)
    arr[:, 10:30] = 255  # the centre square is white
    out = np.asarray(plain_view(Image.fromarray(arr), Preprocess(size=10, interpolation="nearest")))
    assert out.shape == (10, 10, 3) and out.min() == 255
