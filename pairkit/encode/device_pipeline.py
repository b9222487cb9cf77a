"""The ``--decode gpu`` input pipeline: threads read bytes, the device decodes and renders.

Per batch of files:

1. reader threads read each file, hash it and tell plain JPEGs from the rest, one batch
   ahead (the next batch is read while this one decodes); they also decode the files that
   keep the PIL path (PNG, WebP, CMYK, 16-bit, EXIF-rotated, broken; PIL releases the GIL);
2. the plain JPEGs (:func:`pairkit.encode.jpeg.inspect_jpeg`) are decoded together by
   ``torchvision.io.decode_jpeg(list, device=...)`` (nvjpeg on CUDA, libjpeg-turbo on the
   CPU), averaged down like PIL's draft, and their views rendered in torch on the device,
   a few batched operations per image size (:func:`pairkit.encode.device_views.render_batch`);
3. one uint8 (rows, 3, S, S) tensor on the device, in file order, goes to the encoder
   (the rendered tensor itself when no file of the batch took the PIL path).

A JPEG the device decoder rejects goes the PIL path, so it is embedded or recorded in
errors.jsonl with PIL's reason, as without ``--decode gpu``. On CUDA the work runs on a
stream of its own, so the next batch is decoded while the encoder runs on this one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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


@dataclass
class _Read:
    """One file as a reader thread leaves it: its bytes (and, for a plain JPEG, a uint8
    tensor of them for the device decoder), sha256, whether it is a plain JPEG
    (:func:`pairkit.encode.jpeg.inspect_jpeg`), or the reason it can't be read."""

    data: bytes = b""
    digest: str = ""
    plain: bool = False
    tensor: Any = None
    error: str | None = None


def _read(f: ImageFile, max_bytes: int, max_pixels: int | None) -> _Read:
    """Read, hash and inspect one file (in a reader thread: hashing and file reads release
    the GIL, and this work overlaps the decoding of the batch before)."""
    try:
        data = read_image_bytes(f, max_bytes)
    except DecodeError as exc:
        return _Read(error=str(exc))
    digest = hashlib.sha256(data).hexdigest()
    if not inspect_jpeg(data, max_pixels).plain:
        return _Read(data, digest)
    import torch

    return _Read(data, digest, True, torch.frombuffer(bytearray(data), dtype=torch.uint8))


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
        """One :class:`Prepared` per list of file indices, in order. The files of the next
        batch are read (and hashed, and inspected) by the reader threads while this one is
        decoded and rendered."""
        import contextlib

        import torch

        ctx = torch.cuda.stream(self.stream) if self.stream is not None else (
            contextlib.nullcontext())
        ahead = self.read_ahead(index_batches[0]) if index_batches else []
        for n, idx in enumerate(index_batches):
            reads = ahead
            ahead = self.read_ahead(index_batches[n + 1]) if n + 1 < len(index_batches) else []
            with ctx:
                prepared = self.prepare(idx, [f.result() for f in reads])
            if self.stream is not None:
                self.stream.synchronize()  # this thread waits; the encoder's thread does not
            yield prepared

    def read_ahead(self, idx: list[int]) -> list[Future[_Read]]:
        """Start reading the files ``idx`` in the reader threads."""
        return [self.pool.submit(_read, self.files[i], self.max_bytes, self.max_pixels)
                for i in idx]

    def prepare(self, idx: list[int], reads: list[_Read] | None = None) -> Prepared:
        """Decode and render one batch of files (indices into ``files``), read already
        (``reads``, from :meth:`read_ahead`) or read here."""

        if reads is None:
            reads = [f.result() for f in self.read_ahead(idx)]
        errors: dict[int, str] = {}
        plain: list[int] = []
        pil: list[int] = []
        read_of: dict[int, _Read] = {}
        for i, r in zip(idx, reads, strict=True):
            if r.error is not None:
                errors[i] = r.error
                continue
            read_of[i] = r
            (plain if r.plain else pil).append(i)
        decoded, rejected = self._decode(plain, read_of)
        pil += rejected
        pil_arrays = dict(zip(pil, self.pool.map(
            lambda i: _pil_views(read_of[i].data, self.files[i].path, self.views, self.pre,
                                 self.seed), pil), strict=True))
        from pairkit.encode.device_views import drafted_batch, grey_to_rgb, render_batch

        device_ids = [i for i in plain if i in decoded]
        images = drafted_batch([grey_to_rgb(decoded[i]) for i in device_ids],
                               2 * self.pre.size)
        rendered = render_batch(images, [self.files[i].path for i in device_ids], self.views,
                                self.pre, self.seed)
        out = Prepared(on_device=len(device_ids))
        pil_rows: list[tuple[int, np.ndarray]] = []
        for i in idx:
            if i in pil_arrays:
                arr, err = pil_arrays[i]
                if arr is None:
                    errors[i] = err or "can't decode"
                    continue
                pil_rows.append((len(out.ok), arr))
            elif i not in decoded:
                continue
            out.ok.append((i, read_of[i].digest))
        out.errors = [(i, errors[i]) for i in idx if i in errors]
        out.pixels = self._assemble(out.ok, set(device_ids), rendered, pil_rows)
        return out

    def _assemble(self, ok: list[tuple[int, str]], on_device: set[int], rendered: Any,
                  pil_rows: list[tuple[int, np.ndarray]]) -> Any:
        """The batch's pixels in file order: the device-rendered rows as they are when no
        file took the PIL path (the usual case), else both kinds written into one tensor
        with one copy each."""
        import torch

        from pairkit.encode.device_views import to_device

        if not pil_rows:
            return rendered
        v, size = self.views, self.pre.size
        pixels = torch.empty((len(ok) * v, 3, size, size), dtype=torch.uint8,
                             device=self.device)
        dev_rows = [n * v + k for n, (i, _) in enumerate(ok) if i in on_device
                    for k in range(v)]
        if dev_rows:
            pixels.index_copy_(0, to_device(dev_rows, self.device, np.int64), rendered)
        host = torch.from_numpy(np.concatenate([arr for _, arr in pil_rows]))
        rows = to_device([n * v + k for n, _ in pil_rows for k in range(v)], self.device,
                         np.int64)
        pixels.index_copy_(0, rows, host.to(self.device, non_blocking=True))
        return pixels

    def _decode(self, plain: list[int], read_of: dict[int, _Read],
                ) -> tuple[dict[int, Any], list[int]]:
        """Device-decode the plain JPEGs: ({index: (C, H, W) uint8}, indices it rejected)."""
        if not plain:
            return {}, []
        from torchvision.io import ImageReadMode, decode_jpeg

        tensors = [read_of[i].tensor for i in plain]
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
