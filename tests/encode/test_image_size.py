"""``embed --image-size``: the encoder is fed images of that size, the store records it,
queries use it again, and models or values that can't take it are refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.encode.registry import (
    Encoder,
    EncoderRequest,
    Preprocess,
    load_encoder,
    register_encoder,
    unregister_encoder,
)
from pairkit.errors import PairkitError

runner = CliRunner()
SEEN: list[int] = []


def _probe_factory(name: str, request: EncoderRequest) -> Encoder:
    """Records the side of every batch it is fed; cell means as the suite's fake encoder."""
    import torch

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            SEEN.append(int(x.shape[-1]))
            assert x.shape[-2] == x.shape[-1]
            return torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1) + 1e-3

    return Encoder(name="probe", dim=48, preprocess=Preprocess(size=16), module=Probe(),
                   identity={"probe": True})


@pytest.fixture(autouse=True)
def probe_encoder():
    register_encoder("probe", _probe_factory)
    SEEN.clear()
    yield
    unregister_encoder("probe")


def embed(folder: Path, out: Path, *extra: str):
    return runner.invoke(app, ["embed", str(folder), "-o", str(out), "--model", "probe",
                               "--quiet", "--dtype", "float32", *extra])


def test_the_encoder_is_fed_the_size_asked_for(image_folder, tmp_path):
    assert embed(image_folder, tmp_path / "own").exit_code == 0
    assert set(SEEN) == {16}  # the model's own
    SEEN.clear()
    result = embed(image_folder, tmp_path / "s40", "--image-size", "40")
    assert result.exit_code == 0, result.output
    assert set(SEEN) == {40}  # the width probed at 40, then every batch
    store = Store.open(tmp_path / "s40")
    assert store.manifest["embedding"]["image_size"] == 40
    assert store.encoder["preprocess"]["size"] == 40
    assert store.encoder["image_size"] == 40
    assert "image_size" not in Store.open(tmp_path / "own").manifest["embedding"]
    # cell means of a 40 px rendering are not those of a 16 px one
    a, b = Store.open(tmp_path / "own").vectors(), store.vectors()
    assert a.shape == b.shape and not np.allclose(a, b, atol=1e-3)


def test_a_store_is_not_resumed_at_another_size(image_folder, tmp_path):
    assert embed(image_folder, tmp_path / "s", "--image-size", "40").exit_code == 0
    again = embed(image_folder, tmp_path / "s", "--image-size", "40")
    assert again.exit_code == 0 and "already" not in again.output  # quiet, nothing to do
    other = embed(image_folder, tmp_path / "s", "--image-size", "48")
    assert other.exit_code != 0 and "made with other options" in other.output
    assert embed(image_folder, tmp_path / "s", "--image-size", "48", "--force").exit_code == 0
    assert Store.open(tmp_path / "s").manifest["embedding"]["image_size"] == 48


def test_image_queries_use_the_stores_size(image_folder, tmp_path):
    from pairkit.encode.query import encode_images, encoder_request

    assert embed(image_folder, tmp_path / "s", "--image-size", "40").exit_code == 0
    store = Store.open(tmp_path / "s")
    request = encoder_request(store, "cpu")
    assert request.image_size == 40
    items = store.items
    paths = [str(image_folder / p) for p in items["path"][:3]]
    SEEN.clear()
    got = encode_images(request, paths)
    assert set(SEEN) >= {40}
    # view 0 of an image queried again is the row embed wrote for it
    np.testing.assert_allclose(got, store.vectors()[:3], atol=1e-5)


@pytest.mark.parametrize("size", ["8", "0", "5000"])
def test_sizes_out_of_range_are_usage_errors(image_folder, tmp_path, size):
    result = embed(image_folder, tmp_path / "s", "--image-size", size)
    assert result.exit_code == 2
    assert "--image-size must be 16..4096" in result.output
    assert not (tmp_path / "s").exists()


def test_models_that_cannot_take_the_size_are_refused():
    with pytest.raises(PairkitError, match="--image-size does not apply to --model pixels"):
        load_encoder(EncoderRequest("pixels", image_size=96))
    open_clip = pytest.importorskip("open_clip")
    open_clip.add_model_config(Path(__file__).parent / "data" / "pairkit-tiny-clip.json")
    with pytest.raises(PairkitError, match=r"does not take 48 x 48 images \(its input size is 32"):
        load_encoder(EncoderRequest("openclip/pairkit-tiny-clip", pretrained="none",
                                    image_size=48))
    # the model's own size is no change at all
    enc = load_encoder(EncoderRequest("openclip/pairkit-tiny-clip", pretrained="none",
                                      image_size=32))
    assert enc.preprocess.size == 32 and "image_size" not in enc.identity


def test_a_cnn_takes_another_size_and_keeps_its_width():
    pytest.importorskip("timm")
    own = load_encoder(EncoderRequest("timm/resnet10t", pretrained="none"))
    small = load_encoder(EncoderRequest("timm/resnet10t", pretrained="none", image_size=64))
    assert small.preprocess.size == 64 and small.dim == own.dim
    assert small.preprocess.mean == own.preprocess.mean
