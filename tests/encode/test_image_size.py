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


def _as_old_code_wrote_it(store: Path, image_size: int) -> None:
    """The manifest an earlier pairkit wrote for ``--image-size`` equal to the model's own
    size: the size recorded in the embedding identity (the encoder not resized)."""
    import json

    from pairkit.core.integrity import seal

    path = store / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["embedding"]["image_size"] = image_size
    path.write_text(json.dumps(seal(manifest), indent=2))


def test_the_models_own_size_is_the_same_store_as_no_size(image_folder, tmp_path):
    """Found by a bug hunt (hunt-u 9): ``--image-size`` equal to the model's own size made
    another store (refused on resume without it: "image_size differ"), with the same
    vectors. Stores written that way before still resume, with or without the option."""
    assert embed(image_folder, tmp_path / "a", "--image-size", "16").exit_code == 0
    assert "image_size" not in Store.open(tmp_path / "a").manifest["embedding"]
    for extra in ((), ("--image-size", "16")):
        again = embed(image_folder, tmp_path / "a", *extra)
        assert again.exit_code == 0, again.output
    assert embed(image_folder, tmp_path / "b").exit_code == 0
    again = embed(image_folder, tmp_path / "b", "--image-size", "16")
    assert again.exit_code == 0, again.output
    np.testing.assert_array_equal(Store.open(tmp_path / "a").vectors(),
                                  Store.open(tmp_path / "b").vectors())
    # a store of an earlier pairkit, made with --image-size 16 = the model's own
    _as_old_code_wrote_it(tmp_path / "a", 16)
    for extra in ((), ("--image-size", "16")):
        again = embed(image_folder, tmp_path / "a", *extra)
        assert again.exit_code == 0, again.output
    for folder in ("a", "b"):  # another size is still another store
        other = embed(image_folder, tmp_path / folder, "--image-size", "20")
        assert other.exit_code == 1 and "image_size differ" in other.output
    # a store at another size keeps its size
    assert embed(image_folder, tmp_path / "c", "--image-size", "20").exit_code == 0
    other = embed(image_folder, tmp_path / "c")
    assert other.exit_code == 1 and "image_size differ" in other.output


def test_info_shows_the_image_size_and_the_seed_of_random_weights(image_folder, tmp_path):
    """Found by a bug hunt (hunt-u 9): ``info``'s encoder line was the same for a 96 px and
    a 224 px store, and for random weights of seed 0 and seed 1."""
    from pairkit.core.info import info_lines, store_info

    assert embed(image_folder, tmp_path / "s40", "--image-size", "40").exit_code == 0
    line = next(x for x in info_lines(store_info(tmp_path / "s40")) if x.startswith("encoder"))
    assert line == "encoder: probe (image_size 40)"
    for seed in ("0", "1"):
        r = runner.invoke(app, ["embed", str(image_folder), "-o", str(tmp_path / seed),
                                "--model", "timm/test_vit", "--pretrained", "none", "--seed",
                                seed, "--quiet"])
        assert r.exit_code == 0, r.output
        line = next(x for x in info_lines(store_info(tmp_path / seed))
                    if x.startswith("encoder"))
        assert line.endswith(f"pretrained none, seed {seed}, image_size 160)"), line
