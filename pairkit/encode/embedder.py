"""The embedding loop: image folder -> store, resumable, shard by shard.

reader (DataLoader workers: read, hash, decode, render views as uint8)
-> encoder (device, autocast) -> writer (one atomic shard at a time).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pairkit.core.devices import (
    PRECISIONS,
    autocast_dtype,
    resolve_device,
    resolve_precision,
)
from pairkit.core.lock import writer_lock
from pairkit.core.manifest import has_manifest
from pairkit.core.remote import check_writable, location
from pairkit.core.store import (
    ERRORS,
    StoreWriter,
    prepare_store_dir,
    read_manifest,
    sha256_file,
)
from pairkit.encode.images import (
    DEFAULT_MAX_FILE_BYTES,
    DecodeError,
    ImageFile,
    discover_images,
    load_file,
)
from pairkit.encode.registry import DEFAULT_MODEL, Encoder, EncoderRequest, load_encoder
from pairkit.encode.views import render_views
from pairkit.errors import PairkitError, UsageError


@dataclass(frozen=True)
class EmbedConfig:
    images: Path
    store: Path
    model: str = DEFAULT_MODEL
    pretrained: str | None = None
    checkpoint: str | None = None
    views: int = 1
    seed: int = 0
    labels: str | None = None  # None, "folder" or a CSV/parquet/JSONL path -> label
    device: str = "auto"
    precision: str = "auto"
    batch_size: int = 64
    workers: int | None = None
    dtype: str = "float16"
    force: bool = False
    shard_rows: int = 8192
    shard_seconds: float = 120.0
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    decode: str = "auto"  # auto | cpu | gpu (pairkit.encode.device_pipeline)
    image_column: str | None = None  # Hugging Face dataset input (pairkit.encode.hf_datasets)
    label_column: str | None = None


@dataclass
class EmbedSummary:
    images: int = 0  # embedded in this run
    views: int = 0  # rows written in this run
    skipped: int = 0  # files that could not be embedded
    already: int = 0  # sources already in the store
    missing_from_folder: int = 0  # sources in the store no longer in the folder
    seconds: float = 0.0  # whole run, model loading included
    loop_seconds: float = 0.0  # decoding + encoding + writing only
    device: str = "cpu"
    store_rows: int = 0
    decoded_on_device: int = 0  # images decoded by the device pipeline (--decode gpu/auto)
    errors: list[dict[str, str]] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        """Steady rate of the embedding loop (model loading excluded)."""
        return self.images / self.loop_seconds if self.loop_seconds > 0 else 0.0


class ProgressHook:
    """What the loop reports; the CLI passes one that drives a progress bar."""

    def start(self, total: int, description: str) -> None: ...

    def advance(self, images: int) -> None: ...

    def note(self, message: str) -> None: ...


# -- configuration checks -------------------------------------------------------------


def embedding_identity(cfg: EmbedConfig) -> dict[str, Any]:
    """The options that change the embeddings: a store only mixes rows with equal identity."""
    ident: dict[str, Any] = {
        "model": cfg.model,
        "pretrained": cfg.pretrained or "default",
        "views": cfg.views,
        "seed": cfg.seed,
        "dtype": cfg.dtype,
    }
    if cfg.checkpoint:
        if not Path(cfg.checkpoint).is_file():
            raise PairkitError(f"checkpoint {cfg.checkpoint} not found")
        ident["checkpoint_sha256"] = sha256_file(cfg.checkpoint)
    if cfg.image_column:
        ident["image_column"] = cfg.image_column
    return ident


def check_config(cfg: EmbedConfig) -> bool:
    """Everything that can be checked before torch loads, in well under a second: option
    values (UsageError), the image folder, the labels table and checkpoint files, and
    whether pretrained weights can be had (:func:`pairkit.encode.weights.check_pretrained`).
    Returns True when weights must be loaded from the hub cache only."""
    from pairkit.core.devices import check_device
    from pairkit.encode.registry import DEFAULT_OPENCLIP_TAG
    from pairkit.encode.weights import check_pretrained

    if cfg.views < 1:
        raise UsageError(f"--views must be >= 1, got {cfg.views}")
    if cfg.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    if cfg.workers is not None and cfg.workers < 0:
        raise UsageError(f"--workers must be >= 0, got {cfg.workers}")
    if cfg.precision not in PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, got "
                         f"{cfg.precision}")
    if cfg.max_file_bytes < 1:
        raise UsageError(f"--max-file-bytes must be >= 1, got {cfg.max_file_bytes}")
    if cfg.dtype not in ("float16", "float32"):
        raise UsageError(f"--dtype must be float16 or float32, got {cfg.dtype}")
    from pairkit.encode.device_pipeline import check_decode

    check_decode(cfg.decode)
    check_device(cfg.device)
    from pairkit.encode.hf_datasets import is_hf_dataset
    from pairkit.encode.webdataset import expand_braces, is_webdataset

    images = location(cfg.images)
    hf = not isinstance(images, str) and is_hf_dataset(images)
    if not hf and (cfg.image_column or cfg.label_column):
        raise UsageError("--image-column and --label-column need a Hugging Face dataset "
                         "(a save_to_disk folder, .parquet or .arrow)")
    if isinstance(images, str):  # object storage: listed when embedding starts
        if is_webdataset(images):
            expand_braces(images)  # a bad pattern is bad usage
    elif hf:
        if not images.exists():
            raise PairkitError(f"dataset {images} not found")
        if cfg.labels == "folder":
            raise UsageError("--labels folder needs an image folder; a dataset's labels "
                             "come from its label column (--label-column)")
    elif is_webdataset(images):
        expand_braces(str(images))  # a bad pattern is bad usage
        if cfg.labels == "folder":
            raise UsageError("--labels folder needs an image folder; the labels of tar shards "
                             "come from each sample's .cls or .json (or --labels FILE)")
    elif not images.exists():
        raise PairkitError(f"image folder {images} not found")
    elif not images.is_dir():
        raise PairkitError(f"{images} is not a folder (nor .tar shards)")
    if cfg.labels not in (None, "folder") and not isinstance(location(cfg.labels), str) \
            and not Path(cfg.labels).is_file():
        raise PairkitError(f"--labels {cfg.labels}: no such file (or use --labels folder)")
    if cfg.checkpoint and not Path(cfg.checkpoint).is_file():
        raise PairkitError(f"checkpoint {cfg.checkpoint} not found")
    store = location(cfg.store)
    if isinstance(store, str):
        check_writable(store, "a store")  # object storage: a commit it can make
    elif store.exists() and not store.is_dir():
        raise PairkitError(f"output {store} is an existing file, expected a store folder")
    return check_pretrained(cfg.model, cfg.pretrained, cfg.checkpoint, DEFAULT_OPENCLIP_TAG)


def resolve_labels(
    spec: str | None, images: list[ImageFile], root: Path,
    member_labels: dict[str, str | None] | None = None,
) -> tuple[dict[str, str | None], int]:
    """Label per relative path, and how many images got none.

    ``folder``: the first sub-folder name (ImageFolder convention).
    A table path (CSV/parquet/JSONL with ``path`` and ``label``): paths relative to
    the image root, or absolute inside it. None: ``member_labels`` (tar shards' own
    labels, :mod:`pairkit.encode.webdataset`) when given, else none.
    """
    if spec is None and member_labels is not None:
        out = {f.path: member_labels.get(f.path) for f in images}
        missing = sum(v is None for v in out.values())
        return out, 0 if missing == len(out) else missing
    if spec is None:
        return {f.path: None for f in images}, 0
    if spec == "folder":
        out = {f.path: (f.path.split("/", 1)[0] if "/" in f.path else None) for f in images}
        return out, sum(v is None for v in out.values())
    from pairkit.core.tables import read_table

    table = read_table(spec)
    if "path" not in table.columns or "label" not in table.columns:
        raise PairkitError(f"--labels {spec}: the table needs 'path' and 'label' columns")
    mapping: dict[str, str] = {}
    root_abs = root.resolve() if isinstance(root, Path) else None
    for path, label in zip(table["path"].astype(str), table["label"], strict=True):
        p = Path(path)
        if p.is_absolute():
            if root_abs is None:  # images on object storage: paths are keys
                continue
            try:
                p = p.resolve().relative_to(root_abs)
            except ValueError:
                continue
        if label is None or (isinstance(label, float) and math.isnan(label)):
            continue
        mapping[p.as_posix()] = str(label)
    out = {f.path: mapping.get(f.path) for f in images}
    return out, sum(v is None for v in out.values())


# -- the data pipeline ----------------------------------------------------------------


class _SourceDataset:
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


def _collate(batch: list[Any]) -> tuple[list[tuple[int, str]], list[tuple[int, str]], Any]:
    """One batch of :class:`_SourceDataset` items -> ``(ok, errors, pixels)``: (index,
    sha256) and (index, reason) lists and one uint8 tensor of all views (None when none).

    Runs in the worker: one tensor per batch crosses to the main process through shared
    memory, instead of one pickled array per image."""
    import torch

    ok = [(i, digest) for i, _, digest, err in batch if err is None]
    errors = [(i, err) for i, _, _, err in batch if err is not None]
    arrays = [arr for _, arr, _, err in batch if err is None]
    return ok, errors, torch.from_numpy(np.concatenate(arrays)) if arrays else None


def _worker_init(_: int) -> None:
    import torch

    torch.set_num_threads(1)


def default_workers(device: str) -> int:
    """Decoding processes from the thread budget (:mod:`pairkit.core.threads`): none on
    the CPU below a budget of 4 (a background thread decodes; processes would steal the
    encoder's cores), the whole budget (at most 8) beside a GPU."""
    from pairkit.core.threads import plan

    return plan().decode_workers(device)


def _prefetch(batches: Any, depth: int = 2) -> Any:
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


def _batches(n: int, per_batch: int) -> list[list[int]]:
    return [list(range(i, min(i + per_batch, n))) for i in range(0, n, per_batch)]


def replicate(module: Any, device: str, gpus: int) -> Any:
    """``module`` wrapped in DataParallel (one replica per visible GPU) when ``device``
    is the plain ``cuda`` and ``gpus`` > 1; else ``module`` itself. DataParallel on a
    machine without CUDA calls the module directly, so the tests run this path on CPU."""
    import torch

    if device == "cuda" and gpus > 1:
        return torch.nn.DataParallel(module)
    return module


class _Runner:
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
        return out.float().cpu().numpy()


# -- the loop -------------------------------------------------------------------------


@dataclass
class Sources:
    """What ``embed`` reads: ``root`` (the store's image_root), ``files`` sorted by path,
    ``problems`` (path, reason) found while listing, ``member_labels`` (tar shards' own
    labels by path, None for a folder)."""

    root: Path
    files: list[ImageFile]
    problems: list[tuple[str, str]]
    member_labels: dict[str, str | None] | None = None
    member_label_kind: str = "webdataset"  # what the manifest's ``labels`` says of them


def find_sources(images: Path, image_column: str | None = None,
                 label_column: str | None = None) -> Sources:
    """List an image folder (:func:`discover_images`), tar shards
    (:func:`pairkit.encode.webdataset.discover_webdataset`) or a Hugging Face dataset
    (:func:`pairkit.encode.hf_datasets.discover_hf_dataset`)."""
    from pairkit.encode.hf_datasets import discover_hf_dataset, is_hf_dataset
    from pairkit.encode.webdataset import discover_webdataset, is_webdataset

    if is_hf_dataset(images):
        root, files, problems, labels = discover_hf_dataset(images, image_column,
                                                            label_column)
        return Sources(root, files, problems, labels, "dataset")
    if is_webdataset(images):
        root, files, problems, labels = discover_webdataset(images)
        return Sources(root, files, problems, labels)
    files, problems = discover_images(images)
    return Sources(Path(images), files, problems)


def find_any_sources(images: str | Path, image_column: str | None = None,
                     label_column: str | None = None) -> Sources:
    """:func:`find_sources`, or the image objects under a URL
    (:mod:`pairkit.encode.remote_images`; ``root`` is then the URL)."""
    where = location(images)
    if isinstance(where, str):
        from pairkit.encode.webdataset import discover_webdataset, is_webdataset

        if is_webdataset(where):
            root, files, problems, labels = discover_webdataset(where)
            return Sources(root, files, problems, labels)
        from pairkit.encode.remote_images import discover_remote_images

        files, problems = discover_remote_images(where)
        return Sources(where, files, problems)  # type: ignore[arg-type]
    return find_sources(where, image_column, label_column)


def embed_folder(cfg: EmbedConfig, hook: ProgressHook | None = None,
                 executor: Any = None) -> EmbedSummary:
    """Embed every image under ``cfg.images`` (a folder, or webdataset tar shards) into the
    store ``cfg.store``; by ``executor`` when given (the command line passes
    :class:`pairkit.distributed.embed.RayEmbed` for ``--ray``: its ``find_sources(images)``
    lists the images, its ``embed(cfg, writer, todo, labels, errors, summary, hook,
    offline)`` embeds and commits them, this process holding the writer lock).

    Resumes an existing store made with the same embedding options (only
    missing sources are embedded); refuses one made with other options unless
    ``cfg.force``. Files that can't be embedded are skipped and listed in
    STORE/errors.jsonl. Raises PairkitError when nothing at all could be embedded.
    """
    hook = hook or ProgressHook()
    t0 = time.perf_counter()
    weights_offline = check_config(cfg)
    if executor is not None and not (cfg.image_column or cfg.label_column):
        sources = executor.find_sources(location(cfg.images))
    else:
        sources = find_any_sources(cfg.images, cfg.image_column, cfg.label_column)
    files, problems = sources.files, sources.problems
    if not files:
        skipped = (f"; {len(problems)} skipped, e.g. {problems[0][0]!a}: {problems[0][1]}"
                   if problems else "")
        raise PairkitError(
            f"no images found in {cfg.images} (looked for .jpg, .jpeg, .png, .webp, .bmp, "
            f".gif, .tif, .ppm ...){skipped}"
        )
    from pairkit.core.threads import import_torch

    import_torch()  # the thread budget applied before the first torch work
    cfg_store = location(cfg.store)
    labels, unlabeled = resolve_labels(cfg.labels, files, sources.root, sources.member_labels)
    if (cfg.labels or sources.member_labels is not None) and unlabeled:
        hook.note(f"{unlabeled} of {len(files)} images have no label")
    identity = embedding_identity(cfg)
    device = resolve_device(cfg.device)
    # one writer per store: a second embed (or import, index...) stops with the holder's name
    with writer_lock(cfg_store, "store"):
        return _embed_locked(cfg, hook, sources, labels, identity, device, t0,
                             weights_offline, executor)


def same_image_root(store: Path, old_root: str | None, sources: Sources,
                    done: set[str]) -> None:
    """Refuse to add ``sources`` to a store whose rows are relative to another image folder
    (its item paths would point into the wrong folder, and a different image under the same
    relative path would pass for one already embedded). A folder that moved (the old root
    is gone and the new one holds every stored source) is accepted."""
    if isinstance(sources.root, str) or "://" in (old_root or ""):  # object storage
        if old_root and old_root != str(sources.root):
            raise PairkitError(f"store {store} holds images of {old_root}, not "
                               f"{sources.root}; embed into another -o, or pass --force to "
                               "replace the store")
        return
    new_root = sources.root.resolve()
    if not old_root or Path(old_root) == new_root:
        return
    moved = not Path(old_root).exists() and done <= {f.path for f in sources.files}
    if not moved:
        raise PairkitError(
            f"store {store} holds images of {old_root}, not {new_root}; embed into another "
            "-o, or pass --force to replace the store")


def _labels_kind(cfg: EmbedConfig, sources: Sources, labels: dict[str, str | None]) -> Any:
    """The manifest's ``labels``: folder, file, webdataset (tar members' own) or None."""
    if cfg.labels is not None:
        return cfg.labels if cfg.labels == "folder" else "file"
    if sources.member_labels is not None and any(v is not None for v in labels.values()):
        return sources.member_label_kind
    return None


def _embed_locked(cfg: EmbedConfig, hook: ProgressHook, sources: Sources,
                  labels: dict[str, str | None], identity: dict[str, Any], device: str,
                  t0: float, weights_offline: bool = False, executor: Any = None
                  ) -> EmbedSummary:
    """The rest of :func:`embed_folder`, under the store's writer lock."""
    import pandas as pd

    files, problems = sources.files, sources.problems
    cfg_store = location(cfg.store)
    writer: StoreWriter | None = None
    done: set[str] = set()
    if has_manifest(cfg_store) and not cfg.force:
        old = read_manifest(cfg_store).get("embedding")
        if old != identity:
            diff = sorted(k for k in set(identity) | set(old or {})
                          if (old or {}).get(k) != identity.get(k))
            raise PairkitError(
                f"store {cfg_store} was made with other options ({', '.join(diff)} differ); "
                "pass --force to replace it, or choose another -o"
            )
        writer = StoreWriter.resume(cfg_store)
        done = set(writer.items["source"].astype(str))
        same_image_root(cfg_store, writer.manifest.get("image_root"), sources, done)
    else:
        prepare_store_dir(cfg_store, cfg.force)

    todo = [f for f in files if f.path not in done]
    summary = EmbedSummary(device=device)
    summary.already = len(files) - len(todo)
    summary.missing_from_folder = len(done - {f.path for f in files})
    errors: list[dict[str, str]] = [{"path": p, "reason": r} for p, r in problems]
    if not todo:
        summary.seconds = time.perf_counter() - t0
        summary.store_rows = writer.count if writer else 0
        summary.errors = errors
        summary.skipped = sum(1 for e in errors if not e["reason"].startswith("symlink loop"))
        if writer is not None and writer.set_errors(errors):
            writer.commit()
        return summary

    # (a store folder this run created is removed again by the lock when the encoder
    # can't be loaded and nothing was written); on Ray the workers load their own copy,
    # this one only describes the encoder in the manifest
    encoder = load_encoder(EncoderRequest(cfg.model, cfg.pretrained, cfg.checkpoint,
                                          "cpu" if executor else device, cfg.seed,
                                          offline=weights_offline))
    fit = encoder.identity.get("checkpoint_fit", "")
    if fit and fit != "checkpoint layout: as saved":
        hook.note(fit)
    if writer is None:
        writer = StoreWriter.create(
            cfg_store,
            encoder.dim,
            cfg.dtype,
            encoder.describe(),
            {"embedding": identity, "views": cfg.views, "seed": cfg.seed},
        )
    elif writer.manifest["dim"] != encoder.dim:
        raise PairkitError(f"store {cfg_store} has dim {writer.manifest['dim']}, the encoder "
                           f"gives {encoder.dim}; pass --force to replace it")
    writer.update(image_root=sources.root if isinstance(sources.root, str)
                  else str(sources.root.resolve()),
                  labels=_labels_kind(cfg, sources, labels))

    hook.start(len(todo), "embedding")
    t_loop = time.perf_counter()
    if executor is not None:
        executor.embed(cfg, writer, todo, labels, errors, summary, hook, weights_offline)
    else:
        runner = _Runner(encoder, device, cfg.precision)
        pending_vecs: list[np.ndarray] = []
        pending_items: list[dict[str, Any]] = []
        pending_rows = 0
        last_flush = time.perf_counter()

        def flush(whole: bool = True) -> None:
            """Commit the pending rows as shards that end at multiples of --shard-rows
            (``whole=False``: only whole ones, the rest stays pending), so a resumed run
            cuts where a clean run does and gets the same store_id."""
            nonlocal pending_vecs, pending_items, pending_rows, last_flush
            if pending_rows:
                vectors = np.concatenate(pending_vecs)
                cut = pending_rows if whole else aligned_cut(writer.count, pending_rows,
                                                             cfg.shard_rows)
                if cut:
                    writer.set_errors(errors)
                start = 0
                while start < cut:
                    stop = min(cut, start + aligned_cut(writer.count, cut - start,
                                                        cfg.shard_rows, one=True))
                    writer.append(vectors[start:stop], pd.DataFrame(pending_items[start:stop]))
                    start = stop
                pending_vecs = [vectors[cut:]] if cut < pending_rows else []
                pending_items = pending_items[cut:]
                pending_rows = len(pending_items)
            last_flush = time.perf_counter()

        for batch in encode_batches(cfg, todo, labels, encoder, runner, device):
            errors += batch.errors
            if batch.vectors is not None:
                pending_vecs.append(batch.vectors)
                pending_items += batch.items
                pending_rows += len(batch.items)
                summary.images += batch.images
                summary.views += len(batch.items)
                summary.decoded_on_device += batch.on_device
            hook.advance(batch.images + len(batch.errors))
            if pending_rows and time.perf_counter() - last_flush > cfg.shard_seconds:
                flush()  # a slow encoder's rows are saved (at the cost of a boundary)
            elif pending_rows >= cfg.shard_rows - writer.count % cfg.shard_rows:
                flush(whole=False)
        flush()
    summary.loop_seconds = time.perf_counter() - t_loop
    writer.set_errors(errors)
    summary.skipped = sum(1 for e in errors if not e["reason"].startswith("symlink loop"))
    summary.errors = errors
    summary.seconds = time.perf_counter() - t0
    summary.store_rows = writer.count
    writer.update(last_run=_run_record(cfg, summary))
    if writer.count == 0:
        raise PairkitError(
            f"no image could be embedded: all {len(todo)} failed (see {cfg_store}/{ERRORS})"
        )
    return summary


def aligned_cut(count: int, rows: int, shard_rows: int, one: bool = False) -> int:
    """How many of ``rows`` new rows fill shards that end at multiples of ``shard_rows``,
    for a store of ``count`` rows: all whole shards (0 when the first is not full), or
    with ``one`` the first shard only (at most ``rows``)."""
    room = shard_rows - count % shard_rows
    if one:
        return min(rows, room)
    return 0 if rows < room else room + (rows - room) // shard_rows * shard_rows


@dataclass
class EncodedBatch:
    """One encoded batch: ``vectors`` (rows, dim) float32 or None, ``items`` one dict per
    row (path, source, view, label, file_sha256), ``errors`` {path, reason} of the files
    that failed, ``images`` embedded, ``on_device`` of them decoded on the device."""

    vectors: np.ndarray | None
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
    with _batch_source(cfg, files, encoder, device, per_batch) as batches:
        for prep in batches:
            errors = [{"path": files[i].path, "reason": err} for i, err in prep.errors]
            if not prep.ok:
                yield EncodedBatch(None, [], errors)
                continue
            if not isinstance(prep.pixels, np.ndarray):
                _keep_until_used(prep.pixels)
            vectors = runner(prep.pixels)
            items = [{"path": files[i].path, "source": files[i].path, "view": v,
                      "label": labels.get(files[i].path), "file_sha256": digest}
                     for i, digest in prep.ok for v in range(cfg.views)]
            yield EncodedBatch(vectors, items, errors, len(prep.ok), prep.on_device)


def embed_partition(cfg: EmbedConfig, files: list[ImageFile], labels: dict[str, str | None],
                    encoder: Encoder, runner: Any, device: str, shard_name: str
                    ) -> dict[str, Any]:
    """Embed ``files`` (one partition) into one shard file ``shard_name`` of the store,
    written atomically but not committed (:meth:`StoreWriter.add_written_shard` does that).
    Returns ``{record (None when no file could be embedded), items, errors, images,
    on_device}``; what a Ray worker of :mod:`pairkit.distributed.embed` sends back."""
    from pairkit.core.store_writer import write_shard

    vecs: list[np.ndarray] = []
    out: dict[str, Any] = {"record": None, "items": [], "errors": [], "images": 0,
                           "on_device": 0}
    for batch in encode_batches(cfg, files, labels, encoder, runner, device):
        out["errors"] += batch.errors
        if batch.vectors is not None:
            vecs.append(batch.vectors)
            out["items"] += batch.items
            out["images"] += batch.images
            out["on_device"] += batch.on_device
    if vecs:
        out["record"] = write_shard(cfg.store, shard_name, np.concatenate(vecs), cfg.dtype)
    return out


@contextlib.contextmanager
def _batch_source(cfg: EmbedConfig, todo: list[ImageFile], encoder: Encoder, device: str,
                  per_batch: int) -> Iterator[Iterator[Any]]:
    """The batches of the loop (:class:`~pairkit.encode.device_pipeline.Prepared`): the
    device pipeline for ``--decode gpu`` (and auto on CUDA), else PIL in DataLoader
    workers (or a background thread when there are none)."""
    import torch

    from pairkit.encode.device_pipeline import DevicePipeline, Prepared, on_device

    index_batches = _batches(len(todo), per_batch)
    if on_device(cfg.decode, device):
        readers = cfg.workers or default_readers()
        decode_on = "cuda" if device == "cuda" else device
        with DevicePipeline(todo, cfg.views, encoder.preprocess, cfg.seed, decode_on,
                            readers, cfg.max_file_bytes) as pipeline:
            batches = _prefetch(pipeline.batches(index_batches))
            try:
                yield batches
            finally:
                batches.close()  # stop the decoding thread before the readers go
        return
    workers = default_workers(device) if cfg.workers is None else cfg.workers
    if workers and not device.startswith("cuda"):
        from pairkit.core.threads import plan

        # the encoder and the decoding processes share the budget
        torch.set_num_threads(max(1, plan().threads - workers))
    dataset = _SourceDataset(todo, cfg.views, encoder.preprocess, cfg.seed, cfg.max_file_bytes)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_sampler=index_batches,
        num_workers=workers,
        collate_fn=_collate,
        worker_init_fn=_worker_init if workers else None,
        prefetch_factor=4 if workers else None,
        persistent_workers=False,
    )

    def prepared(batch: tuple[Any, Any, Any]) -> Prepared:
        ok, errors, pixels = batch
        return Prepared(ok=ok, errors=errors, pixels=None if pixels is None else pixels.numpy())

    yield (prepared(b) for b in (loader if workers else _prefetch(loader)))


def default_readers() -> int:
    """Reader threads of the device pipeline: the thread budget (pairkit --threads), at
    most 8 (:meth:`pairkit.core.threads.ThreadPlan.decode_workers`)."""
    from pairkit.core.threads import plan

    return plan().decode_workers("cuda")


def _keep_until_used(pixels: Any) -> None:
    """A tensor made on the pipeline's CUDA stream is used on the current stream: tell the
    caching allocator, so its memory is not reused before the encoder has read it."""
    import torch

    if pixels.is_cuda:
        pixels.record_stream(torch.cuda.current_stream(pixels.device))


def _run_record(cfg: EmbedConfig, s: EmbedSummary) -> dict[str, Any]:
    return {
        "images": s.images,
        "views": s.views,
        "skipped": s.skipped,
        "seconds": round(s.seconds, 3),
        "device": s.device,
        "batch_size": cfg.batch_size,
        "precision": cfg.precision,
        "decode": cfg.decode,
        "decoded_on_device": s.decoded_on_device,
    }


def summary_dict(s: EmbedSummary) -> dict[str, Any]:
    d = asdict(s)
    d.pop("errors")
    d["images_per_second"] = round(s.images_per_second, 2)
    return d

