"""The encoder on its device: uint8 pixel batches in, float32 embeddings out."""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.core.devices import autocast_dtype, resolve_precision
from pairkit.encode.registry import Encoder


def replicate(module: Any, device: str, gpus: int) -> Any:
    """``module`` wrapped in DataParallel (one replica per visible GPU) when ``device``
    is the plain ``cuda`` and ``gpus`` > 1; else ``module`` itself. DataParallel on a
    machine without CUDA calls the module directly, so the tests run this path on CPU."""
    import torch

    if device == "cuda" and gpus > 1:
        return torch.nn.DataParallel(module)
    return module


class Runner:
    """Moves uint8 batches to the device, normalises, runs the encoder."""

    def __init__(self, encoder: Encoder, device: str, precision: str) -> None:
        import torch

        self.encoder = encoder
        self.device = torch.device(device)
        module = encoder.module.to(self.device).eval()
        self.module = replicate(module, device, torch.cuda.device_count())
        pre = encoder.preprocess
        self.mean = torch.tensor(pre.mean, device=self.device).view(1, 3, 1, 1) * 255.0
        self.std = torch.tensor(pre.std, device=self.device).view(1, 3, 1, 1) * 255.0
        # auto is fp32 on CPU; an explicit fp16/bf16 runs CPU autocast, the twin of CUDA's
        precision = resolve_precision(precision, self.device.type)
        self.precision = precision
        self.amp_dtype = autocast_dtype(precision)

    def __call__(self, pixels: Any) -> np.ndarray:
        """Embeddings (B, dim) float32 of uint8 pixels (B, 3, S, S): a numpy array, or a
        tensor already on the device (the device pipeline's)."""
        return self.encode(pixels).cpu().numpy()

    def encode(self, pixels: Any) -> Any:
        """:meth:`__call__` without the copy back: a float32 (B, dim) tensor on the device.
        Nothing here waits for the device, so the next batch is prepared and queued while
        this one runs; :class:`~pairkit.encode.shards.ShardBuffer` copies a shard's rows
        to the host once."""
        import torch

        if isinstance(pixels, np.ndarray):
            x = torch.from_numpy(pixels)
            if self.device.type == "cuda":
                x = x.pin_memory().to(self.device, non_blocking=True)
        else:
            x = pixels.to(self.device)
        x = (x.float() - self.mean) / self.std
        dtype = self.amp_dtype
        with torch.inference_mode(), torch.autocast(
            self.device.type, dtype=dtype or torch.float32, enabled=dtype is not None
        ):
            out = self.module(x)
        return out.float()
