"""embed refuses non-finite embeddings (hunt-u 1): an encoder whose weights or precision
overflow gives NaN/inf rows; none of them may reach a shard, and the run fails in one line."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.encode.shards import ShardBuffer
from pairkit.errors import PairkitError

runner = CliRunner()
CALLS = {"n": 0, "nan_at": None}


def _flaky_factory(name: str, request):  # noqa: ANN001 - registry signature
    """The conftest fake encoder, giving NaN for its call number ``CALLS["nan_at"]``."""
    import torch

    from pairkit.encode.registry import Encoder, Preprocess

    class FlakyModule(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            CALLS["n"] += 1
            out = torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1) + 1e-3
            if CALLS["n"] == CALLS["nan_at"]:
                out[0] = float("nan")
                out[-1, 3] = float("inf")
            return out

    return Encoder(name="flaky", dim=48, preprocess=Preprocess(size=16, interpolation="bilinear"),
                   module=FlakyModule(), identity={"flaky": True})


@pytest.fixture(autouse=True)
def flaky_encoder():
    from pairkit.encode.registry import register_encoder, unregister_encoder

    register_encoder("flaky", _flaky_factory)
    CALLS.update(n=0, nan_at=None)
    yield
    unregister_encoder("flaky")


def embed(*args: str):
    return runner.invoke(app, ["embed", *map(str, args), "--model", "flaky", "--quiet",
                               "--batch-size", "4", "--shard-rows", "4"])


def test_nan_batch_is_refused_and_never_committed(image_folder, tmp_path):
    out = tmp_path / "store"
    CALLS["nan_at"] = 2  # the first batch is fine and committed as a shard
    result = embed(image_folder, "-o", out)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: the encoder gave non-finite embeddings for 2 of 4 "
                               "images (e.g. "), lines[0]
    assert "nothing was written for them" in lines[0]
    assert "Traceback" not in result.output
    store = Store.open(out)
    assert len(store.items) == 4
    assert np.isfinite(store.vectors()).all()
    # the weights fixed, a rerun resumes the store and embeds the rest
    CALLS.update(n=0, nan_at=None)
    result = embed(image_folder, "-o", out)
    assert result.exit_code == 0, result.output
    store = Store.open(out)
    assert len(store.items) == 12 and np.isfinite(store.vectors()).all()


def test_nan_in_the_first_batch_makes_no_store(image_folder, tmp_path):
    out = tmp_path / "store"
    CALLS["nan_at"] = 1
    result = embed(image_folder, "-o", out)
    assert result.exit_code == 1, result.output
    assert "non-finite embeddings for 2 of 4 images" in result.output
    assert not (out / "manifest.json").exists()


def test_shard_buffer_refuses_non_finite_rows():
    from pairkit.encode.batches import EncodedBatch

    vectors = np.ones((4, 3), dtype=np.float32)
    vectors[2, 1] = np.inf
    items = [{"path": f"a{i // 2}.jpg", "source": f"a{i // 2}.jpg", "view": i % 2}
             for i in range(4)]
    buffer = ShardBuffer()
    buffer.add(EncodedBatch(vectors=vectors, items=items, images=2, errors=[], on_device=0))
    with pytest.raises(PairkitError, match=r"for 1 of 2 images \(e\.g\. a1\.jpg\)"):
        buffer.take()


def test_write_shard_refuses_non_finite_rows(tmp_path):
    from pairkit.core.store_writer import write_shard

    with pytest.raises(PairkitError, match="non-finite"):
        write_shard(tmp_path, "shard-x.npy", np.array([[1.0, np.nan]]), "float16")
    assert not list(tmp_path.iterdir())
