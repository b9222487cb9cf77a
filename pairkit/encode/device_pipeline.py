"""The ``--decode gpu`` input pipeline: threads read bytes, the device decodes and renders.

Per batch of files:

1. reader threads read each file and hash it (and decode the files that keep the PIL
   path: PNG, WebP, CMYK, 16-bit, EXIF-rotated, broken; PIL releases the GIL);
2. the plain JPEGs (:func:`pairkit.encode.jpeg.inspect_jpeg`) are decoded together by
   ``torchvision.io.decode_jpeg(list, device=...)`` (nvjpeg on CUDA, libjpeg-turbo on the
   CPU), averaged down like PIL's draft, and their views rendered in torch on the device
   (:mod:`pairkit.encode.device_views`);
3. one uint8 (rows, 3, S, S) tensor on the device, in file order, goes to the encoder.

A JPEG the device decoder rejects goes the PIL path, so it is embedded or recorded in
errors.jsonl with PIL's reason, as without ``--decode gpu``. On CUDA the work runs on a
stream of its own, so the next batch is decoded while the encoder runs on this one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pairkit.encode.images import (
    DEFAULT_MAX_FILE_BYTES,
    DecodeError,
    ImageFile,
    decode_image,
    read_image_bytes,
)
from pairkit.encode.jpeg import inspect_jpeg
from pairkit.encode.registry import Preprocess
from pairkit.encode.views import render_views

DECODE_CHOICES = ("auto", "cpu", "gpu")


def check_decode(decode: str) -> str:
    """``decode`` if it is auto, cpu or gpu; PairkitError (usage) otherwise."""
    if decode not in DECODE_CHOICES:
        from pairkit.errors import UsageError

        raise UsageError(f"--decode must be one of {', '.join(DECODE_CHOICES)}, got {decode}")
    return decode


def on_device(decode: str, device: str) -> bool:
    """Whether ``--decode`` (auto, cpu, gpu) runs the device pipeline on ``device``:
    gpu always (on a CPU device with torchvision's CPU decoder), auto on CUDA only."""
    return decode == "gpu" or (decode == "auto" and device.startswith("cuda"))


@dataclass
class Prepared:
    """One batch ready for the encoder: ``ok`` (file index, sha256) in row order,
    ``errors`` (file index, reason), ``pixels`` uint8 (len(ok) * views, 3, S, S) as a
    numpy array or a tensor on the device; ``on_device`` counts the device-decoded files."""

    ok: list[tuple[int, str]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    pixels: Any = None
    on_device: int = 0


def _read(f: ImageFile, max_bytes: int) -> tuple[bytes | None, str | None, str | None]:
    try:
        data = read_image_bytes(f, max_bytes)
    except DecodeError as exc:
        return None, None, str(exc)
    return data, hashlib.sha256(data).hexdigest(), None


def _pil_views(data: bytes, source: str, views: int, pre: Preprocess,
               seed: int) -> tuple[np.ndarray | None, str | None]:
    try:
        img = decode_image(data, draft_size=2 * pre.size)
        return render_views(img, source, views, pre, seed), None
    except DecodeError as exc:
        return None, str(exc)
    except Exception as exc:  # an unexpected decoder failure skips the file, not the run
        return None, f"can't decode ({type(exc).__name__}: {exc})"


class DevicePipeline:
    """Turns batches of file indices into :class:`Prepared` batches on ``device``.

    ``readers``: threads that read, hash and PIL-decode; ``max_bytes``: larger files are
    refused (``--max-file-bytes``). Call :meth:`batches`; close with :meth:`close` (or use
    as a context manager).
    """

    def __init__(self, files: list[ImageFile], views: int, pre: Preprocess, seed: int,
                 device: str, readers: int, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        import torch
        from PIL import Image

        self.files = files
        self.views = views
        self.pre = pre
        self.seed = seed
        self.max_bytes = max_bytes
        self.device = torch.device(device)
        self.pool = ThreadPoolExecutor(max(1, readers), thread_name_prefix="pairkit-read")
        self.max_pixels = Image.MAX_IMAGE_PIXELS
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def __enter__(self) -> DevicePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def batches(self, index_batches: list[list[int]]) -> Iterator[Prepared]:
        """One :class:`Prepared` per list of file indices, in order."""
        import contextlib

        import torch

        ctx = torch.cuda.stream(self.stream) if self.stream is not None else (
            contextlib.nullcontext())
        for idx in index_batches:
            with ctx:
                prepared = self.prepare(idx)
            if self.stream is not None:
                self.stream.synchronize()  # this thread waits; the encoder's thread does not
            yield prepared

    def prepare(self, idx: list[int]) -> Prepared:
        """Read, decode and render one batch of files (indices into ``files``)."""
        import torch

        read = list(self.pool.map(lambda i: _read(self.files[i], self.max_bytes), idx))
        errors: dict[int, str] = {}
        plain: list[int] = []
        pil: list[int] = []
        data_of: dict[int, bytes] = {}
        digest_of: dict[int, str] = {}
        for i, (data, digest, err) in zip(idx, read, strict=True):
            if err is not None or data is None or digest is None:
                errors[i] = err or "unreadable"
                continue
            data_of[i], digest_of[i] = data, digest
            (plain if inspect_jpeg(data, self.max_pixels).plain else pil).append(i)
        decoded, rejected = self._decode(plain, data_of)
        pil += rejected
        pil_arrays = dict(zip(pil, self.pool.map(
            lambda i: _pil_views(data_of[i], self.files[i].path, self.views, self.pre,
                                 self.seed), pil), strict=True))
        from pairkit.encode.device_views import drafted, grey_to_rgb, render_batch

        images = [drafted(grey_to_rgb(decoded[i]), 2 * self.pre.size) for i in plain
                  if i in decoded]
        device_ids = [i for i in plain if i in decoded]
        rendered = render_batch(images, [self.files[i].path for i in device_ids], self.views,
                                self.pre, self.seed)
        row_of = {i: n for n, i in enumerate(device_ids)}
        parts = []
        out = Prepared(on_device=len(device_ids))
        v = self.views
        for i in idx:
            if i in row_of:
                n = row_of[i]
                parts.append(rendered[n * v : (n + 1) * v])
            elif i in pil_arrays:
                arr, err = pil_arrays[i]
                if arr is None:
                    errors[i] = err or "can't decode"
                    continue
                parts.append(torch.from_numpy(arr).to(self.device, non_blocking=True))
            else:
                continue
            out.ok.append((i, digest_of[i]))
        out.errors = [(i, errors[i]) for i in idx if i in errors]
        size = self.pre.size
        out.pixels = (torch.cat(parts) if parts else
                      torch.zeros((0, 3, size, size), dtype=torch.uint8, device=self.device))
        return out

    def _decode(self, plain: list[int], data_of: dict[int, bytes],
                ) -> tuple[dict[int, Any], list[int]]:
        """Device-decode the plain JPEGs: ({index: (C, H, W) uint8}, indices it rejected)."""
        if not plain:
            return {}, []
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        tensors = [torch.frombuffer(bytearray(data_of[i]), dtype=torch.uint8) for i in plain]
        dev = self.device if self.device.type == "cuda" else "cpu"
        try:
            out = decode_jpeg(tensors, mode=ImageReadMode.RGB, device=dev)
            return dict(zip(plain, out, strict=True)), []
        except RuntimeError:  # one bad file fails the whole batch: decode one by one
            decoded: dict[int, Any] = {}
            rejected = []
            for i, t in zip(plain, tensors, strict=True):
                try:
                    decoded[i] = decode_jpeg(t, mode=ImageReadMode.RGB, device=dev)
                except RuntimeError:
                    rejected.append(i)
            return decoded, rejected
