"""Image queries (``search`` with image files) are decoded and encoded one block of
``batch_size`` images at a time: the same rows whatever the block size, and never more
than one block's pixels decoded ahead of the encoder."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.encode import images
from pairkit.encode.query import encode_images, encoder_request
from pairkit.encode.registry import (
    Encoder,
    EncoderRequest,
    Preprocess,
    register_encoder,
    unregister_encoder,
)

COUNT = {"decoded": 0, "encoded": 0, "ahead": 0}


def _probe_factory(name: str, request: EncoderRequest) -> Encoder:
    """Cell means, per image (so independent of the batch); counts what it was fed."""
    import torch

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            COUNT["encoded"] += len(x)
            COUNT["ahead"] = max(COUNT["ahead"], COUNT["decoded"] - COUNT["encoded"] + len(x))
            return torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1) + 1e-3

    return Encoder(name="blockprobe", dim=48, preprocess=Preprocess(size=16), module=Probe(),
                   identity={"blockprobe": True})


@pytest.fixture(autouse=True)
def probe_encoder():
    register_encoder("blockprobe", _probe_factory)
    yield
    unregister_encoder("blockprobe")


@pytest.fixture
def queried(image_folder, tmp_path, monkeypatch):
    r = CliRunner().invoke(app, ["embed", str(image_folder), "-o", str(tmp_path / "s"),
                                 "--model", "blockprobe", "--quiet", "--dtype", "float32"])
    assert r.exit_code == 0, r.output
    store = Store.open(tmp_path / "s")
    load = images.load_image

    def counting(*args, **kwargs):
        COUNT["decoded"] += 1
        return load(*args, **kwargs)

    monkeypatch.setattr(images, "load_image", counting)
    return store, [str(image_folder / p) for p in store.items["path"]]


def test_blocks_give_the_rows_of_one_block(queried) -> None:
    store, paths = queried
    assert len(paths) >= 5
    whole = encode_images(encoder_request(store, "cpu"), paths, batch_size=len(paths))
    for size in (1, 2, 3):
        got = encode_images(encoder_request(store, "cpu"), paths, batch_size=size)
        np.testing.assert_array_equal(got, whole)
    # view 0 of each image is the row embed wrote for it
    np.testing.assert_allclose(whole, store.vectors(), atol=1e-5)


def test_at_most_one_block_is_decoded_ahead_of_the_encoder(queried) -> None:
    store, paths = queried
    COUNT.update(decoded=0, encoded=0, ahead=0)
    encode_images(encoder_request(store, "cpu"), paths, batch_size=2)
    assert COUNT["decoded"] == COUNT["encoded"] == len(paths)
    assert COUNT["ahead"] == 2  # a block of 2, encoded before the next one is decoded


def test_a_store_made_with_a_checkpoint_needs_that_file_again(tmp_path) -> None:
    """Queries must go through the encoder the store was embedded with: the checkpoint's
    sha256 is compared (a manifest faked here; the file's bytes decide, not its name)."""
    from types import SimpleNamespace

    from pairkit.core.integrity import sha256_file
    from pairkit.errors import PairkitError, UsageError

    (tmp_path / "a.pt").write_bytes(b"weights A")
    (tmp_path / "b.pt").write_bytes(b"weights B")
    (tmp_path / "a_copy.pt").write_bytes(b"weights A")

    def store(sha):  # noqa: ANN001, ANN202
        ident = {"model": "timm/test_vit", "pretrained": "default", "seed": 3,
                 **({"checkpoint_sha256": sha} if sha else {})}
        return SimpleNamespace(root=tmp_path / "st", manifest={"embedding": ident},
                               encoder={"name": "timm/test_vit", "checkpoint": "a.pt"})

    made = store(sha256_file(tmp_path / "a.pt"))
    req = encoder_request(made, "cpu", str(tmp_path / "a_copy.pt"))
    assert (req.checkpoint, req.pretrained, req.seed) == (str(tmp_path / "a_copy.pt"), None, 3)
    with pytest.raises(UsageError, match="is not the one store .* embedded with .sha256 diff"):
        encoder_request(made, "cpu", str(tmp_path / "b.pt"))
    with pytest.raises(UsageError, match="embedded with --checkpoint a.pt: pass the same"):
        encoder_request(made, "cpu")
    with pytest.raises(PairkitError, match="not found"):
        encoder_request(made, "cpu", str(tmp_path / "gone.pt"))
    with pytest.raises(UsageError, match="not embedded with a checkpoint: drop --checkpoint"):
        encoder_request(store(None), "cpu", str(tmp_path / "a.pt"))
    assert encoder_request(store(None), "cpu").checkpoint is None
