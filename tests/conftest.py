"""Shared fixtures: a fake encoder, small generated image folders and stores.

Everything is offline and small; nothing downloads weights.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PAIRKIT_OFFLINE", "1")


def _fake_factory(name: str, request):  # noqa: ANN001 - registry signature
    """A deterministic fake encoder: mean colour of 4x4 cells -> 48-d vector."""
    import torch

    from pairkit.encode.registry import Encoder, Preprocess

    class FakeModule(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1) + 1e-3

    return Encoder(
        name="fake",
        dim=48,
        preprocess=Preprocess(size=16, interpolation="bilinear"),
        module=FakeModule(),
        identity={"fake": True},
    )


@pytest.fixture(autouse=True, scope="session")
def fake_encoder():
    """Register ``--model fake`` for the whole test session."""
    from pairkit.encode.registry import register_encoder, unregister_encoder

    register_encoder("fake", _fake_factory)
    yield "fake"
    unregister_encoder("fake")


def make_images(root: Path, n_per_class: int = 4, classes: int = 3, size: int = 24,
                seed: int = 0) -> list[Path]:
    """Write ``classes`` sub-folders of small random JPEG/PNG images; return the paths."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    for c in range(classes):
        folder = root / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        base = rng.integers(0, 255, size=3)
        for i in range(n_per_class):
            arr = np.clip(
                base + rng.normal(0, 40, size=(size, size + 4, 3)), 0, 255
            ).astype(np.uint8)
            ext = "jpg" if i % 2 == 0 else "png"
            p = folder / f"img{i}.{ext}"
            Image.fromarray(arr).save(p)
            paths.append(p)
    return paths


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    root = tmp_path / "images"
    make_images(root)
    return root


def random_store(path: Path, n_sources: int = 20, views: int = 2, dim: int = 16,
                 classes: int = 4, seed: int = 0, dtype: str = "float32"):
    """A store of clustered random vectors: ``views`` views per source, labels by class.

    Returns the opened Store.
    """
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, dim))
    rows, items = [], []
    for s in range(n_sources):
        c = s % classes
        base = centers[c] + 0.5 * rng.normal(size=dim)
        for v in range(views):
            rows.append(base + 0.1 * rng.normal(size=dim))
            items.append({"path": f"c{c}/s{s}.jpg", "source": f"c{c}/s{s}.jpg", "view": v,
                          "label": f"c{c}"})
    return write_store(path, np.asarray(rows, dtype=np.float32), pd.DataFrame(items),
                       encoder={"name": "random"}, dtype=dtype)


@pytest.fixture
def small_store(tmp_path: Path):
    return random_store(tmp_path / "store")


@pytest.fixture(scope="session")
def s3_endpoint():
    """The endpoint of a moto S3 server process on 127.0.0.1 (tests/s3server.py), with
    AWS_ENDPOINT_URL and dummy credentials set for the session."""
    from tests.s3server import ENV, moto_server

    with moto_server() as endpoint:
        if endpoint is None:
            pytest.skip("no S3 test server: needs moto[server] and s3fs (pip install -e "
                        "'.[dev]')")
        with pytest.MonkeyPatch.context() as mp:
            for key, value in ENV.items():
                mp.setenv(key, value)
            mp.setenv("AWS_ENDPOINT_URL", endpoint)
            yield endpoint


@pytest.fixture
def s3(s3_endpoint, request) -> str:
    """``s3://BUCKET``: a new, empty bucket on the test server for this test."""
    import re
    import uuid

    import s3fs

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    bucket = f"{name}-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_endpoint}).mkdir(bucket)
    return f"s3://{bucket}"


class ClosedStdout:
    """A stdout whose reader went away (``| head``): every write and flush raises. Set it
    in the test's body (``monkeypatch.setattr("sys.stdout", ClosedStdout())``): pytest's
    capture replaces ``sys.stdout`` again after the fixtures are set up."""

    def write(self, _: str) -> int:
        raise BrokenPipeError

    def flush(self) -> None:
        raise BrokenPipeError
