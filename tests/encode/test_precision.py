"""Mixed precision on CPU: the twin of the CUDA paths (autocast, DataParallel).

CUDA's default ``--precision auto`` is fp16 autocast, which no CPU-only CI would
otherwise run; a dtype bug there (issue 16: the pixels encoder's scatter under
fp16) crashed every GPU user's first command. CPU autocast runs the same code.

Tolerance: the pixels encoder computes in fp32 whatever autocast says, so its
vectors are equal to fp32's to 1e-6; open_clip and timm encoders under bf16/fp16
agree with fp32 to a cosine of at least 0.99 per row (bf16 keeps 8 bits of
mantissa; on these random-weight models the worst row measured 0.99996 under bf16
and 0.9999995 under fp16, so 0.99 leaves room for other CPUs' kernels).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pairkit.core.store import Store
from pairkit.encode.embedder import EmbedConfig, embed_folder
from pairkit.encode.registry import EncoderRequest, load_encoder
from pairkit.encode.runner import Runner, replicate

TINY = "pairkit-tiny-clip"
ENCODERS = ("pixels", f"openclip/{TINY}", "timm/test_vit")
MIN_COSINE = 0.99


@pytest.fixture(scope="module", autouse=True)
def tiny_clip_config():
    import open_clip

    open_clip.add_model_config(Path(__file__).parent / "data" / f"{TINY}.json")


def _embed(images: Path, out: Path, model: str, precision: str) -> np.ndarray:
    pretrained = None if model == "pixels" else "none"
    embed_folder(EmbedConfig(images=images, store=out, model=model, pretrained=pretrained,
                             views=2, device="cpu", precision=precision, dtype="float32",
                             workers=0, batch_size=8))
    return Store.open(out).vectors(np.float32)


@pytest.mark.parametrize("model", ENCODERS)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_every_encoder_embeds_under_every_precision(image_folder, tmp_path, model, precision):
    want = _embed(image_folder, tmp_path / "fp32", model, "fp32")
    got = _embed(image_folder, tmp_path / precision, model, precision)
    assert got.shape == want.shape and np.isfinite(got).all()
    cos = np.einsum("nd,nd->n", got, want)
    if model == "pixels":
        np.testing.assert_allclose(got, want, atol=1e-6)
    else:
        assert cos.min() >= MIN_COSINE, (model, precision, float(cos.min()))


def test_pixels_encoder_is_fp32_inside_autocast():
    enc = load_encoder(EncoderRequest("pixels"))
    x = torch.rand(3, 3, 64, 64)
    with torch.no_grad():
        ref = enc.module(x)
        for dtype in (torch.bfloat16, torch.float16):
            with torch.autocast("cpu", dtype=dtype):
                out = enc.module(x)
            assert out.dtype == torch.float32
            torch.testing.assert_close(out, ref)


def test_runner_under_dataparallel_matches_plain():
    """The multi-GPU wrapper (DataParallel): without CUDA it calls the module directly,
    so CI checks the runner's path through the wrapper on the CPU; with a GPU the module
    sits on it and DataParallel runs it there (one replica per visible GPU)."""
    enc = load_encoder(EncoderRequest("pixels"))
    assert isinstance(replicate(enc.module, "cuda", 2), torch.nn.DataParallel)
    assert replicate(enc.module, "cuda", 1) is enc.module
    assert replicate(enc.module, "cuda:0", 2) is enc.module  # one named GPU: no replicas
    assert replicate(enc.module, "cpu", 2) is enc.module
    pixels = np.random.default_rng(0).integers(0, 256, (4, 3, 64, 64), dtype=np.uint8)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    runner = Runner(enc, device, "bf16")  # moves the module to the device
    want = runner(pixels)
    runner.module = replicate(runner.module, "cuda", 2)
    assert isinstance(runner.module, torch.nn.DataParallel)
    np.testing.assert_allclose(runner(pixels), want, atol=1e-6)


def test_runner_normalises_uint8_pixels_and_returns_float32():
    """Mutation audit 5b (RU1, RU3): the runner's input is ``(x / 255 - mean) / std`` per
    channel, checked by hand through an identity module; under bf16 autocast the
    embeddings come back float32."""
    import dataclasses

    enc = load_encoder(EncoderRequest("pixels"))
    enc = dataclasses.replace(enc, preprocess=dataclasses.replace(
        enc.preprocess, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3)))  # not the identity
    mean = np.asarray(enc.preprocess.mean, dtype=np.float64).reshape(1, 3, 1, 1)
    std = np.asarray(enc.preprocess.std, dtype=np.float64).reshape(1, 3, 1, 1)
    pixels = np.random.default_rng(1).integers(0, 256, (2, 3, 4, 4), dtype=np.uint8)
    flat = dataclasses.replace(enc, module=torch.nn.Flatten())
    got = Runner(flat, "cpu", "fp32")(pixels)
    want = ((pixels / 255.0 - mean) / std).reshape(2, -1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    torch.manual_seed(0)
    linear = dataclasses.replace(enc, module=torch.nn.Sequential(torch.nn.Flatten(),
                                                                 torch.nn.Linear(48, 5)))
    out = Runner(linear, "cpu", "bf16")(pixels)
    assert out.dtype == np.float32 and out.shape == (2, 5)
