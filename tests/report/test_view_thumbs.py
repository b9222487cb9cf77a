"""A positive that is another view of the anchor's file (issue 20.13): its thumbnail is that
view as embed rendered it (crop, flip, colour), not the file again, and the page data says
so; the rendering is the one embed encoded (checked through the pixels encoder)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.report.stores import open_for_report
from pairkit.report.thumbs import ViewOf, view_image
from tests.report.test_cli_report import page_data

runner = CliRunner()


def pk(*args: object) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def smooth_images(root: Path, classes: int = 3, per_class: int = 4) -> None:
    """84 x 80 images of smooth colour ramps with an off-centre square (JPEG keeps them
    close; a crop, a flip or a colour change moves them far)."""
    yy, xx = np.mgrid[0:80, 0:84] / 80.0
    for c in range(classes):
        for i in range(per_class):
            rng = np.random.default_rng(10 * c + i)
            a, b = rng.uniform(40, 200, 3), rng.uniform(-60, 60, 3)
            arr = a + b * xx[..., None] + b[::-1] * yy[..., None]
            x0, y0 = rng.integers(5, 40, 2)
            arr[y0:y0 + 25, x0:x0 + 20] = rng.uniform(0, 255, 3)
            path = root / f"class{c}" / f"img{i}.{'jpg' if i % 2 else 'png'}"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(path, quality=95)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("views")
    smooth_images(root / "images")
    pk("embed", root / "images", "-o", root / "store", "--model", "pixels", "--views", "3",
       "--labels", "folder", "--dtype", "float32", "-q")
    return root


def test_a_view_is_rendered_as_embed_encoded_it(embedded: Path) -> None:
    import torch

    from pairkit.encode.pixels import PixelFeatures

    info = open_for_report(embedded / "store")
    assert info.views is not None and info.views.size == 64 and info.views.seed == 0
    items = info.store.items
    vectors = info.store.vectors()
    model = PixelFeatures()
    for row in (1, 2, 4, 5):  # views 1 and 2 of two files
        view = int(items["view"].iloc[row])
        assert view >= 1
        real = info.image_root / items["path"].iloc[row]
        spec = ViewOf(real, str(items["source"].iloc[row]), view, info.views)
        img = view_image(real.read_bytes(), spec, info.views.size)
        x = torch.from_numpy(np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255)[None]
        got = model(x)[0].numpy()
        np.testing.assert_allclose(got, vectors[row], atol=2e-5)
        # another view's recipe gives another vector: the check can fail
        other = ViewOf(real, spec.source, view % 2 + 1, info.views)
        x2 = np.asarray(view_image(real.read_bytes(), other, 64), np.float32)
        got2 = model(torch.from_numpy(x2.transpose(2, 0, 1) / 255)[None])[0].numpy()
        assert np.abs(got2 - vectors[row]).max() > 1e-2


def test_a_positive_view_gets_its_own_thumbnail(embedded: Path, tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.parquet"
    pk("mine", embedded / "store", "--hard", "--relation", "instance", "-k", "2", "-q",
       "-o", pairs)
    out = tmp_path / "rep"
    pk("report", pairs, "--store", embedded / "store", "-o", out, "--thumb-size", "48")
    data, _ = page_data(out / "index.html")
    items = data["items"]
    blocks = data["sections"][0]["anchors"]
    checked = 0
    for block in blocks:
        a = items[block["a"]]
        for p_ref, _score in block["p"]:
            p = items[p_ref]
            assert p["path"] == a["path"] and p["view"] != a["view"]  # views of one file
            assert p["thumb"] and a["thumb"] and p["thumb"] != a["thumb"]
            for item in (a, p):
                assert item["view_thumb"] is (item["view"] >= 1)
            if p["view"] == 0:  # the plain image: the file's thumbnail
                continue
            shown = np.asarray(Image.open(io.BytesIO((out / p["thumb"]).read_bytes())),
                               np.float32)
            assert shown.shape == (48, 48, 3)  # the view's square crop, not the 84x80 file
            info = open_for_report(embedded / "store")
            real = info.image_root / p["path"]
            want = np.asarray(view_image(real.read_bytes(),
                                         ViewOf(real, p["path"], p["view"], info.views), 48),
                              np.float32)
            plain = np.asarray(Image.open(real).convert("RGB").resize((48, 48)), np.float32)
            other = np.asarray(view_image(real.read_bytes(), ViewOf(
                real, p["path"], p["view"] % 2 + 1, info.views), 48), np.float32)
            err = np.abs(shown - want).mean()  # 1.6-3.9 grey levels: JPEG at quality 75
            assert err < 6, err
            # the file itself and the file's other view are 14-54 levels away
            assert err < 0.3 * min(np.abs(shown - plain).mean(), np.abs(shown - other).mean())
            checked += 1
    assert checked >= 12


def test_imported_stores_keep_the_file_thumbnail(tmp_path: Path) -> None:
    """No recipe without embed's manifest (import): every view shows the file."""
    from tests.report.kit import image, image_store

    image(tmp_path / "images" / "a.png", 0)
    store = image_store(tmp_path / "store", ["a.png"], [None], image_root=tmp_path / "images")
    assert open_for_report(store.root).views is None
