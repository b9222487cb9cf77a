"""Embed options, the checks made before torch loads, the run's summary and its record.

:class:`EmbedConfig` is the one frozen config of ``pairkit embed`` (and
:func:`pairkit.api.embed`); :func:`check_config` refuses bad options and paths in well
under a second; :class:`EmbedSummary` is what a run reports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pairkit.core.devices import PRECISIONS
from pairkit.core.items import MAX_VIEW
from pairkit.core.remote import check_writable, location
from pairkit.core.store import sha256_file
from pairkit.encode.images import DEFAULT_MAX_FILE_BYTES
from pairkit.encode.registry import DEFAULT_MODEL
from pairkit.errors import PairkitError, UsageError

MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 16, 4096  # --image-size bounds (pixels a side)


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
    image_size: int | None = None  # None: the encoder's own input size


@dataclass
class EmbedSummary:
    images: int = 0  # embedded in this run
    views: int = 0  # rows written in this run
    skipped: int = 0  # files that could not be embedded
    already: int = 0  # sources already in the store
    missing_from_folder: int = 0  # sources in the store no longer in the folder
    seconds: float = 0.0  # whole run, model loading included
    loop_seconds: float = 0.0  # decoding + encoding + writing only
    device: str | None = "cpu"  # None: no device ran (nothing to embed)
    cluster: str | None = None  # with --ray: the cluster's description (device: its workers')
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
    if cfg.image_size is not None:
        ident["image_size"] = cfg.image_size
    return ident


def check_config(cfg: EmbedConfig) -> bool:
    """Everything that can be checked before torch loads, in well under a second: option
    values (UsageError), the image folder, the labels table and checkpoint files, and
    whether pretrained weights can be had (:func:`pairkit.encode.weights.check_pretrained`).
    Returns True when weights must be loaded from the hub cache only."""
    from pairkit.core.devices import check_device
    from pairkit.core.paths import check_folder_output
    from pairkit.encode.registry import DEFAULT_OPENCLIP_TAG
    from pairkit.encode.weights import check_pretrained

    check_folder_output(cfg.store, "-o", "a store is a folder")
    if cfg.views < 1:
        raise UsageError(f"--views must be >= 1, got {cfg.views}")
    if cfg.views > MAX_VIEW + 1:  # views are numbered 0 .. MAX_VIEW in the store
        raise UsageError(f"--views must be <= {MAX_VIEW + 1}, got {cfg.views}")
    if cfg.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    if cfg.image_size is not None and not MIN_IMAGE_SIZE <= cfg.image_size <= MAX_IMAGE_SIZE:
        raise UsageError(f"--image-size must be {MIN_IMAGE_SIZE}..{MAX_IMAGE_SIZE} pixels, got "
                         f"{cfg.image_size}")
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
    from pairkit.encode.registry import PIXELS_SIZE, check_model_name, split_model_name

    check_model_name(cfg.model)
    if split_model_name(cfg.model)[0] == "pixels":
        if cfg.image_size is not None:
            raise UsageError("--image-size does not apply to --model pixels (its features are "
                             f"computed at {PIXELS_SIZE} px)")
        if cfg.checkpoint is not None:
            raise UsageError("--checkpoint does not apply to --model pixels (it has no weights)")
        if cfg.pretrained is not None:
            raise UsageError("--pretrained does not apply to --model pixels (it has no weights)")
    from pairkit.encode.weights import check_weight_options

    check_weight_options(cfg.pretrained, cfg.checkpoint,
                         tag_for_preprocessing=split_model_name(cfg.model)[0] == "openclip")
    from pairkit.encode.hf_datasets import is_hf_dataset
    from pairkit.encode.webdataset import expand_braces, is_webdataset

    images = location(cfg.images)
    hf = not isinstance(images, str) and is_hf_dataset(images)
    if not hf and (cfg.image_column or cfg.label_column):
        raise UsageError("--image-column and --label-column need a Hugging Face dataset "
                         "(a save_to_disk folder, .parquet or .arrow)")
    if is_webdataset(str(images)) and not hf and cfg.labels == "folder":
        # local or object storage alike: a shard's file name is no label
        raise UsageError("--labels folder needs an image folder; the labels of tar shards "
                         "come from each sample's .cls or .json (or --labels FILE)")
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
    elif not images.exists():
        raise PairkitError(f"image folder {images} not found")
    elif not images.is_dir():
        raise PairkitError(f"{images} is not a folder (nor .tar shards)")
    if cfg.labels not in (None, "folder") and not isinstance(location(cfg.labels), str) \
            and not Path(cfg.labels).is_file():
        what = (" is a folder, expected a table of path,label" if Path(cfg.labels).is_dir()
                else ": no such file")
        raise PairkitError(f"--labels {cfg.labels}{what} (or use --labels folder)")
    if cfg.checkpoint and not Path(cfg.checkpoint).is_file():
        what = "is a folder, expected a weights file" if Path(cfg.checkpoint).is_dir() \
            else "not found"
        raise PairkitError(f"checkpoint {cfg.checkpoint} {what}")
    store = location(cfg.store)
    if isinstance(store, str):
        check_writable(store, "a store")  # object storage: a commit it can make
    elif store.exists() and not store.is_dir():
        raise PairkitError(f"output {store} is an existing file, expected a store folder")
    return check_pretrained(cfg.model, cfg.pretrained, cfg.checkpoint, DEFAULT_OPENCLIP_TAG)


def run_record(cfg: EmbedConfig, s: EmbedSummary) -> dict[str, Any]:
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
