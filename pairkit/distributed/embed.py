"""``embed --ray``: partitions of the images embedded by Ray tasks, shards committed here.

The images still missing from the store (sorted by path, as the local loop takes them)
are cut into partitions of ``--shard-rows / --views`` images; one Ray task per partition
reads, decodes and encodes it with the local pipeline
(:func:`pairkit.encode.embedder.embed_partition`: one task per GPU at a time on GPU
nodes, else tasks of ``--threads`` CPUs) and writes one shard file into the store
atomically, under a name given here. This process holds the store's writer lock and
commits the finished shards in partition order (:meth:`StoreWriter.add_written_shard`),
so the store gets the local run's rows in the local run's order. A worker that dies is
retried by Ray; a partition that still fails leaves its images for the next run, and an
interrupted run resumes like a local one (uncommitted shard files are removed, their
images embedded again).

Webdataset shards are listed by Ray tasks too (headers only); an image folder is walked
here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pairkit.distributed import RETRIES, Cluster, connect, crash_marker, maybe_crash, require_ray
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    from pairkit.core.store_writer import StoreWriter
    from pairkit.encode.config import EmbedConfig, EmbedSummary, ProgressHook
    from pairkit.encode.images import ImageFile

TARS_PER_TASK = 8
_WORKER: dict[str, Any] = {}  # per worker process: the encoder of the last task


def _list_tars(shards: list[tuple[str, Path]]) -> list[tuple[Any, ...]]:
    from pairkit.encode.webdataset import list_members

    return [list_members(path, rel) for rel, path in shards]


class RayEmbed:
    """``embed --ray ADDRESS``: the ``executor`` of
    :func:`pairkit.encode.embedder.embed_folder` (see the module docstring)."""

    def __init__(self, address: str) -> None:
        require_ray()  # not installed: one line before any work
        self.address = address

    def find_sources(self, images: Path) -> Any:
        return find_sources_on_ray(self.address, images)

    def embed(self, cfg: EmbedConfig, writer: StoreWriter, todo: list[ImageFile],
              labels: dict[str, str | None], errors: list[dict[str, str]],
              summary: EmbedSummary, hook: ProgressHook, offline: bool) -> None:
        embed_on_ray(self.address, cfg, writer, todo, labels, errors, summary, hook, offline)


def find_sources_on_ray(address: str, images: Path) -> Any:
    """:func:`pairkit.encode.embedder.find_sources`, tar shards listed by Ray tasks."""
    from pairkit.encode.embedder import Sources, find_any_sources
    from pairkit.encode.webdataset import is_webdataset, list_shards

    if isinstance(images, str) or not is_webdataset(images):
        return find_any_sources(images)
    ray = require_ray()
    connect(address)
    root, shards, problems = list_shards(images)
    task = ray.remote(_list_tars).options(num_cpus=1, max_retries=RETRIES)
    futures = [task.remote(shards[i:i + TARS_PER_TASK])
               for i in range(0, len(shards), TARS_PER_TASK)]
    files, labels = [], {}
    for listed in ray.get(futures):
        for f, p, lab in listed:
            files += f
            problems += p
            labels.update(lab)
    files.sort(key=lambda f: f.path)
    return Sources(root, files, problems, labels)


def _embed_task(cfg: EmbedConfig, files: list[ImageFile], labels: dict[str, Any], shard_name: str,
                offline: bool, threads: int, device: str, crash: str | None,
                recorded: dict[str, Any] | None = None) -> dict[str, Any]:
    """One partition on a Ray worker: the encoder is loaded once per worker process, with
    the preprocessing the store recorded (``recorded``: its ``encoder.preprocess``)."""
    maybe_crash(crash)
    from pairkit.encode.embedder import embed_partition
    from pairkit.encode.registry import EncoderRequest, load_encoder
    from pairkit.encode.runner import Runner

    key = repr((cfg.model, cfg.pretrained, cfg.checkpoint, cfg.seed, cfg.precision, device,
                threads, cfg.image_size, recorded))
    if _WORKER.get("key") != key:
        from pairkit.core.threads import configure, import_torch

        _WORKER.clear()
        configure(threads)
        import_torch()
        encoder = load_encoder(EncoderRequest(cfg.model, cfg.pretrained, cfg.checkpoint,
                                              device, cfg.seed, offline=offline,
                                              image_size=cfg.image_size,
                                              recorded_preprocess=recorded))
        _WORKER.update(key=key, encoder=encoder,
                       runner=Runner(encoder, device, cfg.precision))
    return embed_partition(cfg, files, labels, _WORKER["encoder"], _WORKER["runner"], device,
                           shard_name)


def for_workers(cfg: EmbedConfig, todo: list[ImageFile]
                ) -> tuple[EmbedConfig, list[ImageFile]]:
    """``cfg`` and ``todo`` with every local path absolute, as this process sees it: a
    worker runs in another working directory, where a relative ``-o`` put the shards
    (outside the store) and a relative image folder made every image "vanish"."""
    from dataclasses import replace

    from pairkit.core.remote import is_url

    def absolute(path: Any) -> Any:
        return path if is_url(path) else Path(os.path.abspath(path))

    return (replace(cfg, store=absolute(cfg.store)),
            [f if is_url(f.abs_path) else replace(f, abs_path=absolute(f.abs_path))
             for f in todo])


def _task_options(cluster: Cluster, device: str) -> tuple[dict[str, Any], str, int]:
    """Ray options of a partition task, the device it runs on and its threads: one GPU
    each (with its share of the CPUs for decoding, at most 8) when the cluster has GPUs
    and ``--device`` allows them, else ``--threads`` CPUs."""
    if cluster.gpus and device != "cpu":
        threads = max(1, min(8, cluster.cpus // cluster.gpus))
        return {"num_gpus": 1, "num_cpus": threads}, "cuda", threads
    if device.startswith("cuda"):
        raise PairkitError(f"--device {device}: the Ray cluster has no GPUs")
    return {"num_cpus": cluster.threads}, "cpu", cluster.threads


def embed_on_ray(address: str, cfg: EmbedConfig, writer: StoreWriter, todo: list[ImageFile],
                 labels: dict[str, str | None], errors: list[dict[str, str]],
                 summary: EmbedSummary, hook: ProgressHook, offline: bool) -> None:
    """Embed ``todo`` on the cluster at ``address`` into ``writer``'s store (see the module
    docstring); adds to ``errors`` and ``summary`` as the local loop does."""
    import pandas as pd

    ray = require_ray()
    cluster = connect(address)
    options, device, threads = _task_options(cluster, cfg.device)
    cfg, todo = for_workers(cfg, todo)
    summary.device, summary.cluster = device, cluster.describe()
    per = max(1, cfg.shard_rows // cfg.views)
    parts = [todo[i:i + per] for i in range(0, len(todo), per)]
    names = [writer.next_shard_name(i) for i in range(len(parts))]
    task = ray.remote(max_retries=RETRIES, max_calls=0, **options)(_embed_task)
    crash = crash_marker()
    from pairkit.encode.embedder import recorded_preprocess

    recorded = recorded_preprocess(writer.manifest)  # an earlier pairkit's store keeps its own
    slots = cluster.gpus if device == "cuda" else cluster.workers
    window = 2 * max(1, slots)  # tasks in flight: Ray schedules them, this bounds memory
    pending: dict[Any, int] = {}
    finished: dict[int, Any] = {}
    failed: list[tuple[int, str]] = []
    submitted = committed = 0
    while committed < len(parts):
        while submitted < len(parts) and len(pending) < window:
            part = parts[submitted]
            sub = {f.path: labels.get(f.path) for f in part}
            pending[task.remote(cfg, part, sub, names[submitted], offline, threads, device,
                                crash, recorded)] = submitted
            submitted += 1
        ready, _ = ray.wait(list(pending), num_returns=1)
        for future in ready:
            index = pending.pop(future)
            try:
                finished[index] = ray.get(future)
            except Exception as exc:
                from pairkit.distributed import worker_error

                finished[index] = worker_error(exc, f"embedding partition {index}")
            hook.advance(len(parts[index]))
        while committed in finished:
            result = finished.pop(committed)
            if isinstance(result, PairkitError):
                failed.append((len(parts[committed]), str(result)))
            else:
                errors += result["errors"]
                if result["record"] is not None:
                    writer.set_errors(errors)
                    writer.add_written_shard(result["record"], pd.DataFrame(result["items"]))
                    writer.commit()
                summary.images += result["images"]
                summary.views += len(result["items"])
                summary.decoded_on_device += result["on_device"]
            committed += 1
    if failed:
        writer.set_errors(errors)
        writer.commit()
        lost = sum(n for n, _ in failed)
        raise PairkitError(f"{len(failed)} of {len(parts)} partitions ({lost} images) failed "
                           f"on the Ray workers ({failed[0][1]}); the store keeps the "
                           f"{writer.count} rows committed: rerun the command to embed the "
                           "rest")
