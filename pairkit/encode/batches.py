"""The batches of the embedding loop: read, decode and render the views of files, then encode.

Two sources of :class:`~pairkit.encode.device_pipeline.Prepared` batches: PIL in DataLoader
workers (or a background thread when there are none), and the device pipeline
(``--decode gpu``, and auto on CUDA: :mod:`pairkit.encode.device_pipeline`).
:func:`encode_batches` runs the encoder on them, in file order; the local loop
(:mod:`pairkit.encode.embedder`) and the Ray partition workers both consume it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pairkit.encode.config import EmbedConfig
from pairkit.encode.images import DEFAULT_MAX_FILE_BYTES, DecodeError, ImageFile, load_file
from pairkit.encode.registry import Encoder
from pairkit.encode.views import render_views


class SourceDataset:
    """Item i = all views of image i: (index, uint8 (V,3,S,S) or None, sha256, error)."""

    def __init__(self, files: list[ImageFile], views: int, pre: Any, seed: int,
                 max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.files = files
        self.views = views
        self.pre = pre
        self.seed = seed
        self.max_bytes = max_bytes

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[int, np.ndarray | None, str | None, str | None]:
        f = self.files[i]
        try:
            img, digest = load_file(f, draft_size=2 * self.pre.size, max_bytes=self.max_bytes)
            arr = render_views(img, f.path, self.views, self.pre, self.seed)
            return i, arr, digest, None
        except DecodeError as exc:
            return i, None, None, str(exc)
        except Exception as exc:  # an unexpected decoder failure skips the file, not the run
            return i, None, None, f"can't decode ({type(exc).__name__}: {exc})"


def collate(batch: list[Any]) -> tuple[list[tuple[int, str]], list[tuple[int, str]], Any]:
    """One batch of :class:`SourceDataset` items -> ``(ok, errors, pixels)``: (index,
    sha256) and (index, reason) lists and one uint8 tensor of all views (None when none).

    Runs in the worker: one tensor per batch crosses to the main process through shared
    memory, instead of one pickled array per image."""
    import torch

    ok = [(i, digest) for i, _, digest, err in batch if err is None]
    errors = [(i, err) for i, _, _, err in batch if err is not None]
    arrays = [arr for _, arr, _, err in batch if err is None]
    return ok, errors, torch.from_numpy(np.concatenate(arrays)) if arrays else None


def worker_init(_: int) -> None:
    import torch

    torch.set_num_threads(1)


def default_workers(device: str) -> int:
    """Decoding processes from the thread budget (:mod:`pairkit.core.threads`): none on
    the CPU below a budget of 4 (a background thread decodes; processes would steal the
    encoder's cores), the whole budget (at most 8) beside a GPU."""
    from pairkit.core.threads import plan

    return plan().decode_workers(device)


def decode_processes(asked: int | None, device: str, batches: int) -> int:
    """Decoding processes of the PIL path: ``--workers`` (None: :func:`default_workers`),
    at most one per CPU this process may use (torch warns past them, and each one more
    only competes) and one per batch (a process takes whole batches)."""
    from pairkit.core.threads import available_cpus

    workers = default_workers(device) if asked is None else asked
    return max(0, min(workers, available_cpus(), batches))


def workers_note(cfg: EmbedConfig, images: int, device: str) -> str | None:
    """The warning when :func:`decode_processes` starts fewer than ``--workers`` asked for
    ``images`` images; None when it starts them all (or the device pipeline decodes)."""
    from pairkit.core.threads import available_cpus
    from pairkit.encode.device_pipeline import on_device

    if cfg.workers is None or on_device(cfg.decode, device):
        return None
    batches = len(index_batches(images, max(1, cfg.batch_size // cfg.views)))
    used = decode_processes(cfg.workers, device, batches)
    if used >= cfg.workers:
        return None
    return (f"--workers {cfg.workers} capped at {used}: at most one decoding process per CPU "
            f"this process may use ({available_cpus()}) and per batch ({batches})")


def default_readers() -> int:
    """Reader threads of the device pipeline: the thread budget (pairkit --threads), at
    most 8 (:meth:`pairkit.core.threads.ThreadPlan.decode_workers`)."""
    from pairkit.core.threads import plan

    return plan().decode_workers("cuda")


def prefetch(batches: Any, depth: int = 2) -> Any:
    """Iterate ``batches`` in a background thread, ``depth`` batches ahead.

    With no worker processes, decoding the next batch (PIL releases the GIL while it
    decodes and resizes) overlaps with the encoder running on the current one.
    """
    import queue
    import threading

    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for item in batches:
                while not stop.is_set():
                    try:
                        q.put(("ok", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(("ok", done))
        except BaseException as exc:  # handed to the consumer, raised there
            q.put(("error", exc))

    thread = threading.Thread(target=produce, name="pairkit-decode", daemon=True)
    thread.start()
    try:
        while True:
            kind, item = q.get()
            if kind == "error":
                raise item
            if item is done:
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)


def index_batches(n: int, per_batch: int) -> list[list[int]]:
    return [list(range(i, min(i + per_batch, n))) for i in range(0, n, per_batch)]


@contextlib.contextmanager
def batch_source(cfg: EmbedConfig, todo: list[ImageFile], encoder: Encoder, device: str,
                 per_batch: int) -> Iterator[Iterator[Any]]:
    """The batches of the loop (:class:`~pairkit.encode.device_pipeline.Prepared`): the
    device pipeline for ``--decode gpu`` (and auto on CUDA), else PIL in DataLoader
    workers (or a background thread when there are none)."""
    import torch

    from pairkit.encode.device_pipeline import DevicePipeline, Prepared, on_device

    batch_indices = index_batches(len(todo), per_batch)
    if on_device(cfg.decode, device):
        readers = cfg.workers or default_readers()
        decode_on = "cuda" if device == "cuda" else device
        with DevicePipeline(todo, cfg.views, encoder.preprocess, cfg.seed, decode_on,
                            readers, cfg.max_file_bytes) as pipeline:
            batches = prefetch(pipeline.batches(batch_indices))
            try:
                yield batches
            finally:
                batches.close()  # stop the decoding thread before the readers go
        return
    workers = decode_processes(cfg.workers, device, len(batch_indices))
    if workers and not device.startswith("cuda"):
        from pairkit.core.threads import plan

        # the encoder and the decoding processes share the budget
        torch.set_num_threads(max(1, plan().threads - workers))
    dataset = SourceDataset(todo, cfg.views, encoder.preprocess, cfg.seed, cfg.max_file_bytes)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_sampler=batch_indices,
        num_workers=workers,
        collate_fn=collate,
        worker_init_fn=worker_init if workers else None,
        prefetch_factor=4 if workers else None,
        persistent_workers=False,
    )

    def prepared(batch: tuple[Any, Any, Any]) -> Prepared:
        ok, errors, pixels = batch
        return Prepared(ok=ok, errors=errors, pixels=None if pixels is None else pixels.numpy())

    yield (prepared(b) for b in (loader if workers else prefetch(loader)))


@dataclass
class EncodedBatch:
    """One encoded batch: ``vectors`` (rows, dim) float32 (a tensor on the encoder's device,
    :meth:`~pairkit.encode.runner.Runner.encode`) or None, ``items`` one dict per
    row (path, source, view, label, file_sha256), ``errors`` {path, reason} of the files
    that failed, ``images`` embedded, ``on_device`` of them decoded on the device."""

    vectors: Any
    items: list[dict[str, Any]]
    errors: list[dict[str, str]]
    images: int = 0
    on_device: int = 0


def encode_batches(cfg: EmbedConfig, files: list[ImageFile], labels: dict[str, str | None],
                   encoder: Encoder, runner: Any, device: str) -> Iterator[EncodedBatch]:
    """Read, decode, render the views of and encode ``files``, one batch at a time, in
    file order: the embedding loop without the writing (the local store writer and the
    Ray workers both consume it)."""
    per_batch = max(1, cfg.batch_size // cfg.views)
    with batch_source(cfg, files, encoder, device, per_batch) as batches:
        for prep in batches:
            errors = [{"path": files[i].path, "reason": err} for i, err in prep.errors]
            if not prep.ok:
                yield EncodedBatch(None, [], errors)
                continue
            if not isinstance(prep.pixels, np.ndarray):
                keep_until_used(prep.pixels)
            vectors = runner.encode(prep.pixels)
            items = [{"path": files[i].path, "source": files[i].path, "view": v,
                      "label": labels.get(files[i].path), "file_sha256": digest}
                     for i, digest in prep.ok for v in range(cfg.views)]
            yield EncodedBatch(vectors, items, errors, len(prep.ok), prep.on_device)


def keep_until_used(pixels: Any) -> None:
    """A tensor made on the pipeline's CUDA stream is used on the current stream: tell the
    caching allocator, so its memory is not reused before the encoder has read it."""
    import torch

    if pixels.is_cuda:
        pixels.record_stream(torch.cuda.current_stream(pixels.device))
