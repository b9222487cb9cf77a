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


def _whole_then_crop(img: Image.Image, pre: Preprocess) -> np.ndarray:
    """View 0 as it was first made: the whole picture resized, then the centre cropped."""
    from pairkit.encode.views import pil_resample

    w, h = img.size
    scale = pre.size / min(w, h)
    nw, nh = max(pre.size, round(w * scale)), max(pre.size, round(h * scale))
    out = img.resize((nw, nh), pil_resample(pre.interpolation), reducing_gap=3.0)
    left, top = (nw - pre.size) // 2, (nh - pre.size) // 2
    return np.asarray(out.crop((left, top, left + pre.size, top + pre.size))).astype(int)


def _smooth(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, (max(1, h // 7), max(1, w // 7), 3), dtype=np.uint8)
    return Image.fromarray(small).resize((w, h), Image.Resampling.BILINEAR)


def test_plain_view_of_a_thin_picture_resamples_only_the_centre(monkeypatch) -> None:  # noqa: ANN001
    """A 2 x 20000 strip scaled whole to short side 224 was 500 M pixels (2 GB, 10 s)."""
    images = [_smooth(2, 20000), _smooth(20000, 2), _smooth(300, 90000)]
    made: list[int] = []
    resize = Image.Image.resize

    def counted(self: Image.Image, size: tuple[int, int], *args: object, **kw: object):  # noqa: ANN202
        made.append(size[0] * size[1])
        return resize(self, size, *args, **kw)

    monkeypatch.setattr(Image.Image, "resize", counted)
    pre = Preprocess(size=224, interpolation="bicubic")
    for img in images:
        out = plain_view(img, pre)
        assert out.size == (224, 224)
    assert max(made) <= 224 * 224


def test_plain_view_pixels_are_those_of_the_whole_resize() -> None:
    """Normal pictures: the same pixels as before; thin ones within the filter's rounding."""
    for interpolation in ("bicubic", "bilinear", "lanczos"):
        for size in (16, 64):
            pre = Preprocess(size=size, interpolation=interpolation)
            for w, h in ((60, 40), (40, 300), (500, 70), (1000, 1300)):  # aspect <= 8
                got = np.asarray(plain_view(_smooth(w, h), pre)).astype(int)
                np.testing.assert_array_equal(got, _whole_then_crop(_smooth(w, h), pre))
            for w, h in ((9, 600), (700, 11), (40, 3000), (4000, 60)):  # thinner: centre box
                diff = np.abs(np.asarray(plain_view(_smooth(w, h), pre)).astype(int)
                              - _whole_then_crop(_smooth(w, h), pre))
                assert diff.max() <= 2 and diff.mean() < 0.3, (interpolation, size, w, h)


def test_each_augmented_view_is_its_own_draw() -> None:
    """View v of a render is augmented_view with view_rng(seed, source, v): views 1, 2 differ."""
    from pairkit.encode.views import augmented_view

    img = _img()
    v = render_views(img, "x.jpg", 3, PRE, seed=0)
    assert not np.array_equal(v[1], v[2])
    for k in (1, 2):
        want = np.asarray(augmented_view(img, PRE, view_rng(0, "x.jpg", k))).transpose(2, 0, 1)
        np.testing.assert_array_equal(v[k], want)


def test_crop_box_aspect_ratio_spans_the_range() -> None:
    """Crop boxes keep w/h inside Augment().ratio (3/4, 4/3), and both ends are reached."""
    from pairkit.encode.views import Augment

    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(500):
        left, top, right, bottom = crop_box(100, 100, rng, Augment())
        ratios.append((right - left) / (bottom - top))
    r = np.array(ratios)
    assert r.min() >= 3 / 4 - 0.02 and r.max() <= 4 / 3 + 0.02
    assert r.min() < 0.85 and r.max() > 1.15
