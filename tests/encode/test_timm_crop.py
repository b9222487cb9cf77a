"""timm encoders follow the model's own eval transform (crop_pct, crop_mode), as
``timm.data.create_transform`` makes it; stores of an earlier pairkit (no crop_pct recorded)
keep the preprocessing they were made with. Found by a bug hunt (hunt-u 6)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.encode.registry import EncoderRequest, Preprocess, load_encoder
from pairkit.encode.views import plain_view

runner = CliRunner()


def _pictures() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    out = []
    for w, h in ((40, 120), (120, 40), (77, 53), (300, 200), (61, 61), (33, 700)):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 7) % 256, (y * 5) % 256, ((x + y) * 3) % 256], -1)
        img = (base + rng.integers(0, 60, (h, w, 3))).clip(0, 255).astype(np.uint8)
        out.append(Image.fromarray(img))
    return out


@pytest.mark.parametrize(("crop_mode", "crop_pct", "interpolation"), [
    ("center", 0.875, "bicubic"), ("center", 0.95, "bilinear"), ("squash", 1.0, "bicubic"),
    ("squash", 0.9, "bilinear"), ("border", 1.0, "bicubic"), ("border", 0.9, "bicubic")])
def test_view_0_is_timms_eval_transform(crop_mode: str, crop_pct: float,
                                        interpolation: str) -> None:
    """Against timm's own pipeline, on generated pictures of several shapes: equal pixels,
    but for a strip more than 8 times longer than wide (its kept box alone is resized)."""
    import timm.data

    from pairkit.encode.models import TIMM_CROP_MODES

    mean, std = (0.5, 0.4, 0.3), (0.25, 0.2, 0.3)
    cfg = {"input_size": (3, 48, 48), "interpolation": interpolation, "mean": mean,
           "std": std, "crop_pct": crop_pct, "crop_mode": crop_mode}
    reference = timm.data.create_transform(**cfg)
    pre = Preprocess(size=48, mean=mean, std=std, interpolation=interpolation,
                     resize=TIMM_CROP_MODES[crop_mode], crop_pct=crop_pct)
    for img in _pictures():
        got = np.asarray(plain_view(img, pre), dtype=np.float32).transpose(2, 0, 1)
        got = (got / 255.0 - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
        want = reference(img).numpy()
        assert got.shape == want.shape == (3, 48, 48)
        if max(img.size) / min(img.size) > 8 and crop_mode == "center":
            # the kept box alone resampled (O(size^2) memory): PIL's passes in another
            # order, rounded between: 0.26 levels on average, 0.5% of pixels over one
            levels = np.abs(got - want) * np.array(std)[:, None, None] * 255
            assert levels.mean() < 0.5 and (levels > 1.01).mean() < 0.01, img.size
        else:
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=str(img.size))


def test_timm_encoder_takes_and_records_the_models_crop() -> None:
    enc = load_encoder(EncoderRequest("timm/test_vit", pretrained="none"))
    assert (enc.preprocess.crop_pct, enc.preprocess.resize) == (0.95, "shortest")
    record = enc.describe()["preprocess"]
    assert record["crop_pct"] == 0.95 and record["resize"] == "shortest"
    # open_clip and pixels record no crop_pct (their resize goes to the size itself)
    assert "crop_pct" not in load_encoder(EncoderRequest("pixels")).describe()["preprocess"]


def _unseal_crop(store: Path) -> None:
    """The manifest an earlier pairkit wrote for a timm model: no crop_pct."""
    from pairkit.core.integrity import seal

    path = store / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["encoder"]["preprocess"]["crop_pct"]
    path.write_text(json.dumps(seal(manifest), indent=2))


def _embed(folder: Path, out: Path, *extra: str):
    return runner.invoke(app, ["embed", str(folder), "-o", str(out), "--model", "timm/test_vit",
                               "--pretrained", "none", "--dtype", "float32", *extra])


def test_a_store_of_an_earlier_pairkit_keeps_its_preprocessing(tmp_path: Path) -> None:
    """A timm store made before crop_pct was applied resumes (and answers image queries)
    with the preprocessing it recorded, never two in one store; a new store crops."""
    from pairkit.encode.query import encode_images, encoder_request

    folder = tmp_path / "imgs"
    folder.mkdir()
    pictures = _pictures()
    for i, img in enumerate(pictures[:3]):
        img.save(folder / f"p{i}.png")
    legacy = Preprocess(size=160, mean=(0.5,) * 3, std=(0.5,) * 3)  # what it recorded
    assert _embed(folder, tmp_path / "old", "--quiet").exit_code == 0
    _unseal_crop(tmp_path / "old")
    pictures[3].save(folder / "p3.png")  # added since
    r = _embed(folder, tmp_path / "old")
    assert r.exit_code == 0, r.output
    assert "earlier pairkit that did not apply timm/test_vit's crop_pct 0.95" in r.stderr
    assert r.stderr.count("\n") >= 1 and "Traceback" not in r.output
    old = Store.open(tmp_path / "old")
    assert "crop_pct" not in old.encoder["preprocess"]
    assert _embed(folder, tmp_path / "new", "--quiet").exit_code == 0
    new = Store.open(tmp_path / "new")
    assert new.encoder["preprocess"]["crop_pct"] == 0.95
    row_old = old.vectors()[list(old.items["path"]).index("p3.png")]
    row_new = new.vectors()[list(new.items["path"]).index("p3.png")]
    assert float(row_old @ row_new) < 0.9999  # another crop: other vectors
    # the resumed row is the old preprocessing's: the model fed legacy's rendering
    enc = load_encoder(EncoderRequest("timm/test_vit", pretrained="none"))
    pixels = np.asarray(plain_view(pictures[3], legacy), np.float32).transpose(2, 0, 1)
    x = (torch.from_numpy(pixels)[None] / 255.0 - 0.5) / 0.5
    with torch.no_grad():
        want = enc.module(x)[0].numpy()
    np.testing.assert_allclose(row_old, want / np.linalg.norm(want), atol=1e-5)
    # image queries use each store's own preprocessing
    for store, row in ((old, row_old), (new, row_new)):
        got = encode_images(encoder_request(store, "cpu"), [str(folder / "p3.png")])[0]
        np.testing.assert_allclose(got, row, atol=1e-5)
