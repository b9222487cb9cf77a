"""The pixel check of near-duplicates: alignment scores against numpy references, planted
copies in a generated folder found and look-alikes left out, and ``mine``'s rule using
the same decision as ``dedup``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from pairkit.errors import UsageError
from pairkit.mine.near_duplicate_check import (
    PixelCheck,
    ThresholdCheck,
    choose_check,
    images_readable,
)
from pairkit.mine.near_duplicate_copies import EDITS, edited_copy
from pairkit.mine.near_duplicate_pixels import (
    MARGIN,
    aligned_correlation,
    descriptors,
    refine_correlation,
)


def texture(seed: int, size: int = 64, smooth: float = 2.5) -> np.ndarray:
    """A smooth random grey texture in [0, 1], (size, size) float32."""
    rng = np.random.default_rng(seed)
    x = ndimage.gaussian_filter(rng.normal(size=(size, size)), smooth)
    x = (x - x.min()) / (x.max() - x.min())
    return x.astype(np.float32)


def window_corr(a: np.ndarray, b: np.ndarray, m: int = MARGIN) -> float:
    s = a.shape[-1]
    return float(np.corrcoef(a[m: s - m, m: s - m].ravel(), b[m: s - m, m: s - m].ravel())[0, 1])


def test_aligned_correlation_references() -> None:
    a, other = texture(0, 32), texture(1, 32)
    shifted = np.roll(a, (1, -2), axis=(0, 1))  # an integer shift inside the window
    flat = np.full((32, 32), 0.5, np.float32)
    r, scale, shift = aligned_correlation(np.stack([a, a, other, flat, flat]),
                                          np.stack([a, shifted, a, flat + 0.05, a]))
    assert r[0] == pytest.approx(1.0, abs=1e-5)
    assert scale[0] == pytest.approx(1.0) and np.allclose(shift[0], 0.0)
    assert r[1] == pytest.approx(1.0, abs=1e-4)  # the search finds the shift
    # the identity is among the transforms: never below the plain window correlation
    assert r[2] >= window_corr(other, a) - 1e-5
    assert r[2] < 0.9
    assert r[3] == 1.0 and r[4] == 0.0  # flat vs flat (close grey), flat vs texture


def test_refinement_reaches_a_sub_pixel_shift() -> None:
    big = texture(3, 96, smooth=3.0)
    moved = ndimage.shift(big, (0.4, -0.7), order=3, mode="nearest").astype(np.float32)
    coarse_a = np.asarray(Image.fromarray((big * 255).astype(np.uint8)).resize((32, 32)),
                          np.float32)[None] / 255
    coarse_b = np.asarray(Image.fromarray((moved * 255).astype(np.uint8)).resize((32, 32)),
                          np.float32)[None] / 255
    _, s, d = aligned_correlation(coarse_a, coarse_b)
    start = window_corr(big, moved, 12)
    r = refine_correlation(big[None], moved[None], s, d * 3)
    assert start < 0.999
    assert r[0] > 0.9995 and r[0] > start


def test_descriptors_are_unit_rows_and_zero_for_flat() -> None:
    d = descriptors(np.stack([texture(0, 32), np.full((32, 32), 0.3, np.float32)]))
    assert d.shape == (2, 144)
    assert np.linalg.norm(d[0]) == pytest.approx(1.0, abs=1e-5)
    assert not d[1].any()


@pytest.mark.parametrize("edit", EDITS)
def test_every_edit_is_a_close_copy(edit: str) -> None:
    img = Image.fromarray((texture(5, 80) * 255).astype(np.uint8)).convert("RGB")
    out = edited_copy(img, edit, np.random.default_rng(0))
    w, h = out.size
    if edit == "resize":
        assert (w, h) != (80, 80)
    elif edit == "crop":
        assert 72 <= w < 80 and 72 <= h < 80
    else:
        assert (w, h) == (80, 80)
    if edit != "resize":
        grey = np.asarray(out.convert("L"), np.float32)
        base = np.asarray(img.convert("L"), np.float32)[: grey.shape[0], : grey.shape[1]]
        assert window_corr(base, grey, 8) > 0.8  # the same picture, slightly changed
    with pytest.raises(ValueError):
        edited_copy(img, "rotate", np.random.default_rng(0))


def planted_folder(root: Path) -> tuple[list[str], set[frozenset[int]]]:
    """24 textures, 6 with a planted copy, 4 look-alikes (a texture with a blob added);
    returns (paths, the true duplicate pairs as sets of path positions)."""
    rng = np.random.default_rng(7)
    root.mkdir(parents=True)
    paths, truth = [], set()
    for i in range(24):
        img = Image.fromarray((texture(100 + i, 72) * 255).astype(np.uint8)).convert("RGB")
        paths.append(f"t{i:02d}.png")
        img.save(root / paths[-1])
        if i < 6:
            copy = edited_copy(img, EDITS[i % len(EDITS)], rng)
            paths.append(f"t{i:02d}-copy.png")
            copy.save(root / paths[-1])
            truth.add(frozenset((len(paths) - 2, len(paths) - 1)))
        elif i < 10:
            a = np.asarray(img, np.float32)
            a[20:44, 20:44] = 255 - a[20:44, 20:44]  # a different picture that looks alike
            paths.append(f"t{i:02d}-lookalike.png")
            Image.fromarray(a.astype(np.uint8)).save(root / paths[-1])
    return paths, truth


def test_pixel_check_finds_copies_not_lookalikes(tmp_path: Path) -> None:
    from pairkit.mine.near_duplicates import find_near_duplicates

    paths, truth = planted_folder(tmp_path / "img")
    # vectors that say nothing about copies: random, so the descriptor finds candidates
    vecs = np.random.default_rng(0).normal(size=(len(paths), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    check = PixelCheck(vecs, np.array(paths, dtype=object), str(tmp_path / "img"), sample=12)
    res = find_near_duplicates(vecs, check=check, keep="first")
    found = {frozenset(g["id"].tolist()) for _, g in res.table.groupby("group")}
    assert found == truth
    d = res.decision
    assert d["method"] == "pixels" and d["copies"] == 12 * len(EDITS)
    assert 0.9 < d["threshold"] <= 1.0


def test_unreadable_images_fall_back_to_the_vectors(tmp_path: Path) -> None:
    paths, _ = planted_folder(tmp_path / "img")
    (tmp_path / "img" / paths[1]).unlink()  # the copy of t00 is gone
    vecs = np.eye(len(paths), dtype=np.float32)
    vecs[1] = vecs[0]  # ... but its vector equals its original's
    check = PixelCheck(vecs, np.array(paths, dtype=object), str(tmp_path / "img"), sample=6)
    a, b = next(check.edges(np.arange(len(paths))))
    assert (0, 1) in set(zip(a.tolist(), b.tolist(), strict=True))


def test_choose_check(tmp_path: Path) -> None:
    paths, _ = planted_folder(tmp_path / "img")
    vecs = np.eye(len(paths), dtype=np.float32)
    p = np.array(paths, dtype=object)
    root = str(tmp_path / "img")
    assert images_readable(root, p) and not images_readable(None, p)
    assert isinstance(choose_check(vecs, p, root), PixelCheck)
    assert isinstance(choose_check(vecs, p, root, threshold=0.9), ThresholdCheck)
    assert isinstance(choose_check(vecs, p, None), ThresholdCheck)
    assert isinstance(choose_check(vecs, p, root, "threshold"), ThresholdCheck)
    with pytest.raises(UsageError, match="--method pixels needs the store's images"):
        choose_check(vecs, p, str(tmp_path / "gone"), "pixels")
    with pytest.raises(UsageError, match="--method must be one of"):
        choose_check(vecs, p, root, "magic")
    with pytest.raises(UsageError, match="--pixel-threshold must be in"):
        choose_check(vecs, p, root, pixel_threshold=1.5)


def test_mine_rule_uses_the_same_decision_as_dedup(tmp_path: Path) -> None:
    from pairkit.mine.false_negatives import FalseNegativeConfig, build_context
    from pairkit.mine.fn_context import near_duplicate_group_ids
    from pairkit.mine.near_duplicates import find_near_duplicates

    paths, truth = planted_folder(tmp_path / "img")
    vecs = np.random.default_rng(1).normal(size=(len(paths), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    p = np.array(paths, dtype=object)
    root = str(tmp_path / "img")
    cfg = FalseNegativeConfig(rules=("near-duplicate",), near_duplicate_method="auto")
    ctx = build_context(vecs, None, np.arange(len(paths)), cfg, paths=p, image_root=root)
    groups = near_duplicate_group_ids(ctx, cfg)
    dedup = find_near_duplicates(vecs, check=choose_check(vecs, p, root),
                                 sources=np.arange(len(paths)))
    assert np.array_equal(groups, dedup.item_group)
    found = {frozenset(np.flatnonzero(groups == g).tolist()) for g in set(groups) - {-1}}
    assert found == truth
    assert ctx.near_duplicate_decision["method"] == "pixels"
    # without the images the threshold decides, as before
    bare = build_context(vecs, None, np.arange(len(paths)), cfg)
    assert not (near_duplicate_group_ids(bare, cfg) >= 0).any()


def calibrated_on_all(root: Path, paths: list[str]):  # noqa: ANN201
    """find_near_duplicates of the images with the pixel check calibrated on every one
    (random vectors: the thumbnails propose the candidates)."""
    from pairkit.mine.near_duplicates import find_near_duplicates

    vecs = np.random.default_rng(0).normal(size=(len(paths), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    check = PixelCheck(vecs, np.array(paths, dtype=object), str(root), sample=len(paths))
    return find_near_duplicates(vecs, check=check, keep="first")


def test_thin_images_do_not_collapse_the_calibrated_threshold(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): three 1-pixel-high strips in the calibration
    sample made copies of no pixels (the crop took the whole side), scoring 0; the
    threshold went to 0.0 and every image of the store became a copy to drop."""
    paths, truth = planted_folder(tmp_path / "img")
    rng = np.random.default_rng(1)
    for j in range(3):  # scan lines, divider graphics
        strip = rng.integers(0, 255, (1, 600, 3)).astype(np.uint8)
        Image.fromarray(strip).save(tmp_path / "img" / f"strip{j}.png")
        paths.append(f"strip{j}.png")
    res = calibrated_on_all(tmp_path / "img", paths)
    found = {frozenset(g["id"].tolist()) for _, g in res.table.groupby("group")}
    assert found == truth
    # the copies' threshold itself (here the look-alikes raised the final one) and the
    # prefilter are the copies', not 0
    assert res.decision["copies_threshold"] > 0.9 and res.decision["prefilter"] > 0.5


def test_nearly_blank_images_do_not_collapse_the_calibrated_threshold(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): a mostly transparent logo's edited copies scored
    about 0 against it (a 3-pixel mark on a blank page, at the check's resolution), which
    took the threshold to 0. Copies the check can't see are left out of the calibration."""
    paths, truth = planted_folder(tmp_path / "img")
    for j in range(4):
        a = np.zeros((200, 200, 4), np.uint8)
        a[..., :3] = 255
        a[100:103, 50 + 20 * j:53 + 20 * j] = (0, 0, 0, 255)
        Image.fromarray(a, "RGBA").save(tmp_path / "img" / f"logo{j}.png")
        paths.append(f"logo{j}.png")
    res = calibrated_on_all(tmp_path / "img", paths)
    assert res.decision["copies_threshold"] > 0.9 and res.decision["copies_left_out"] > 0
    found = {frozenset(g["id"].tolist()) for _, g in res.table.groupby("group")}
    assert truth <= found
    for extra in found - truth:  # blank pages may pass for each other, nothing else
        assert all(paths[i].startswith("logo") for i in extra)


def test_a_shift_of_a_small_image_moves_it_at_least_a_pixel() -> None:
    """At 20 px, 1-2 % of the side rounds to 0: the shift is still a pixel (docs), so the
    copy is never the image itself, and its content sits a pixel or two off."""
    img = Image.fromarray((texture(7, 20) * 255).astype(np.uint8)).convert("RGB")
    a = np.asarray(img)
    for seed in range(5):
        out = np.asarray(edited_copy(img, "shift", np.random.default_rng(seed)))
        assert out.shape == a.shape and not np.array_equal(out, a)
        assert any(np.array_equal(np.roll(a, (dy, dx), (0, 1))[2:-2, 2:-2], out[2:-2, 2:-2])
                   for dy in (-1, 1) for dx in (-1, 1))


def test_a_crop_never_takes_a_whole_side() -> None:
    rng = np.random.default_rng(0)
    for size in ((1, 600), (600, 1), (2, 2), (1, 1)):
        img = Image.fromarray(np.zeros((size[1], size[0], 3), np.uint8))
        for _ in range(20):
            w, h = edited_copy(img, "crop", rng).size
            assert w >= 1 and h >= 1
