"""The embedding loop: image folder -> store, resumable, shard by shard.

sources (:mod:`~pairkit.encode.sources`) -> batches: read, hash, decode, render views
(:mod:`~pairkit.encode.batches`) -> encoder on the device (:mod:`~pairkit.encode.runner`)
-> shard buffer -> writer, one atomic shard at a time (:mod:`~pairkit.encode.shards`).
Options and checks: :mod:`~pairkit.encode.config`.
"""

from __future__ import annotations

import time
from typing import Any

from pairkit.core.devices import resolve_device
from pairkit.core.info import skipped_files
from pairkit.core.lock import writer_lock
from pairkit.core.manifest import has_manifest
from pairkit.core.remote import location
from pairkit.core.store import read_manifest
from pairkit.core.store_writer import StoreWriter, prepare_store_dir
from pairkit.encode.batches import encode_batches, workers_note
from pairkit.encode.config import (
    EmbedConfig,
    EmbedSummary,
    ProgressHook,
    check_config,
    embedding_identity,
    run_record,
    summary_dict,
)
from pairkit.encode.images import IMAGE_EXTENSIONS, ImageFile
from pairkit.encode.registry import Encoder, EncoderRequest, load_encoder
from pairkit.encode.runner import Runner
from pairkit.encode.shards import ShardBuffer, shard_unit
from pairkit.encode.sources import (
    Sources,
    check_same_labels,
    find_any_sources,
    find_sources,
    labels_kind,
    resolve_labels,
    same_image_root,
)
from pairkit.errors import PairkitError

# the public names of the embedding step, importable from here as before the split
__all__ = ["EmbedConfig", "EmbedSummary", "ProgressHook", "Sources", "StoreOpener",
           "embed_folder", "embed_here", "embed_partition", "find_any_sources", "find_sources",
           "identity_differences", "resume_or_prepare", "summary_dict"]


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
            f"no images found in {cfg.images} (looked for "
            f"{', '.join(sorted(IMAGE_EXTENSIONS))}){skipped}"
        )
    cfg_store = location(cfg.store)
    labels, _ = resolve_labels(cfg.labels, files, sources.root, sources.member_labels)
    identity = embedding_identity(cfg)
    # torch loads (and the device resolves) only once there is something to embed: a rerun
    # with nothing to do, or another store's options, is told before (_embed_locked)
    device = cfg.device
    # one writer per store: a second embed (or import, index...) stops with the holder's name
    with writer_lock(cfg_store, "store"):
        return _embed_locked(cfg, hook, sources, labels, identity, device, t0,
                             weights_offline, executor)


def _embed_locked(cfg: EmbedConfig, hook: ProgressHook, sources: Sources,
                  labels: dict[str, str | None], identity: dict[str, Any], device: str,
                  t0: float, weights_offline: bool = False, executor: Any = None
                  ) -> EmbedSummary:
    """The rest of :func:`embed_folder`, under the store's writer lock: the store resumed
    or prepared, the encoder loaded, the images embedded (here: :func:`embed_here`, or by
    ``executor``), the run recorded."""
    files, problems = sources.files, sources.problems
    cfg_store = location(cfg.store)
    writer, done = resume_or_prepare(cfg, identity, sources,
                                     labels_kind(cfg, sources, labels))
    if writer is not None:  # another labels table or column: no vocabularies mixed
        check_same_labels(writer.items, labels)
    todo = [f for f in files if f.path not in done]
    if writer is not None and cfg.views > 1:
        views = writer.items.groupby("source").size()
        if torn := int((views < cfg.views).sum()):
            hook.note(f"{torn} images in store {cfg_store} hold fewer than {cfg.views} views "
                      "(a shard of an interrupted run of an earlier pairkit cut them; their "
                      "other views are not embedded again): pass --force to embed all again")
    summary = EmbedSummary(device=None)  # the device, once one runs (none: nothing to do)
    summary.already = len(files) - len(todo)
    summary.missing_from_folder = len(done - {f.path for f in files})
    errors: list[dict[str, str]] = [{"path": p, "reason": r} for p, r in problems]
    if not todo:
        summary.seconds = time.perf_counter() - t0
        summary.store_rows = writer.count if writer else 0
        summary.errors = errors
        summary.skipped = skipped_files(errors)
        if writer is not None and writer.set_errors(errors):
            writer.commit()
        if writer is not None:
            _note_unlabelled(cfg, sources, labels, writer.items, hook)
        return summary
    from pairkit.core.threads import import_torch

    import_torch()  # the thread budget applied before the first torch work
    # on Ray the workers' devices count (the executor picks them), not this machine's
    device = summary.device = "cpu" if executor else resolve_device(device)

    # (a store folder this run created is removed again by the lock when the encoder
    # can't be loaded and nothing was written); on Ray the workers load their own copy,
    # this one only describes the encoder in the manifest
    recorded = recorded_preprocess(writer.manifest) if writer is not None else None
    encoder = load_encoder(EncoderRequest(cfg.model, cfg.pretrained, cfg.checkpoint,
                                          "cpu" if executor else device, cfg.seed,
                                          offline=weights_offline, image_size=cfg.image_size,
                                          recorded_preprocess=recorded))
    if "image_size" in identity and "image_size" not in encoder.identity:
        # --image-size was the model's own size (the encoder not resized): the same store as
        # without the option (a resumed store keeps the identity it has)
        identity = {k: v for k, v in identity.items() if k != "image_size"}
    fit = encoder.identity.get("checkpoint_fit", "")
    if fit and fit != "checkpoint layout: as saved":
        hook.note(fit)
    for note in encoder.notes:
        hook.note(note)
    root = sources.root if isinstance(sources.root, str) else str(sources.root.resolve())
    kind = labels_kind(cfg, sources, labels)
    if writer is not None:
        if writer.manifest["dim"] != encoder.dim:
            raise PairkitError(f"store {cfg_store} has dim {writer.manifest['dim']}, the "
                               f"encoder gives {encoder.dim}; pass --force to replace it")
        writer.update(image_root=root, labels=kind)
    store = StoreOpener(cfg, writer, encoder.describe(), encoder.dim,
                        {"embedding": identity, "views": cfg.views, "seed": cfg.seed,
                         "image_root": root, "labels": kind})

    hook.start(len(todo), "embedding")
    t_loop = time.perf_counter()
    if executor is not None:  # the workers write shards into the store: it is made first
        executor.embed(cfg, store.get(), todo, labels, errors, summary, hook,
                       weights_offline)
    else:
        embed_here(cfg, store, todo, labels, errors, summary, hook, encoder, device)
    summary.loop_seconds = time.perf_counter() - t_loop
    if store.count == 0:  # a new store that got no row: nothing is committed
        failed = errors[len(problems):] or errors
        example = f" (e.g. {failed[0]['path']!a}: {failed[0]['reason']})" if failed else ""
        raise PairkitError(f"no image could be embedded: all {len(todo)} failed{example}; "
                           f"nothing was written to {cfg_store}")
    writer = store.get()
    writer.set_errors(errors)
    summary.skipped = skipped_files(errors)
    summary.errors = errors
    summary.seconds = time.perf_counter() - t0
    summary.store_rows = writer.count
    writer.update(last_run=run_record(cfg, summary))
    _note_unlabelled(cfg, sources, labels, writer.items, hook)
    return summary


def _note_unlabelled(cfg: EmbedConfig, sources: Sources, labels: dict[str, str | None],
                    items: Any, hook: ProgressHook) -> None:
    """Note ``N of M images have no label`` when labels were asked for (``--labels``, or
    the shards' own when some have one): M counts the images of this listing that are in
    the store (``items``, its item table: embedded now or before), not the files that
    failed to decode."""
    if not (cfg.labels or sources.member_labels is not None):
        return
    stored = set(items["path"])
    kept = [path for path in labels if path in stored]
    missing = sum(labels[path] is None for path in kept)
    # the shards' own labels: a listing without any label at all is not a labelled one
    if missing and (cfg.labels is not None or missing < len(kept)):
        hook.note(f"{missing} of {len(kept)} images have no label")


class StoreOpener:
    """The store a run writes into: the resumed ``writer``, or a new store made when the
    run has its first shard to commit (:meth:`get`). So a run that fails before (a model
    that can't load, Ctrl-C while it loads, no image embeddable) leaves no store behind,
    and ``--force`` replaces the old store only at the new one's first commit: it stays
    whole until then (:meth:`StoreWriter.create`)."""

    def __init__(self, cfg: EmbedConfig, writer: StoreWriter | None,
                 encoder: dict[str, Any], dim: int, extra: dict[str, Any]) -> None:
        self.cfg = cfg
        self.writer = writer
        self.encoder = encoder
        self.dim = dim
        self.extra = extra

    @property
    def count(self) -> int:
        """Rows committed (0 before the new store is made)."""
        return self.writer.count if self.writer is not None else 0

    def get(self) -> StoreWriter:
        """The writer; a new store's is made here, its manifest written at its first
        commit (which replaces an old store, ``--force``)."""
        if self.writer is None:
            cfg_store = location(self.cfg.store)
            if self.cfg.force and has_manifest(cfg_store):
                prepare_store_dir(cfg_store, True)  # the old store goes at the commit
            self.writer = StoreWriter.create(cfg_store, self.dim, self.cfg.dtype, self.encoder,
                                             self.extra, commit=False)
        return self.writer


def resume_or_prepare(cfg: EmbedConfig, identity: dict[str, Any], sources: Sources,
                      labels: Any = None) -> tuple[StoreWriter | None, set[str]]:
    """``(writer, sources it holds)`` of the store an earlier run with the same options
    (``identity``) and the same kind of ``labels`` (the manifest's, :func:`labels_kind`)
    left at ``cfg.store``, to resume; ``(None, empty)`` after preparing the folder for a
    new store (with ``--force`` an old store stays until :class:`StoreOpener` makes the
    new one). PairkitError when the store there was made with
    other options or labels, or from other images."""
    cfg_store = location(cfg.store)
    if has_manifest(cfg_store) and not cfg.force:
        manifest = read_manifest(cfg_store)
        if manifest.get("labels") != labels:  # labelled and unlabelled rows mixed
            raise PairkitError(
                f"store {cfg_store} was embedded with {labels_text(manifest.get('labels'))}, "
                f"this run has {labels_text(labels)}: labels are read as images are "
                "embedded; pass the same --labels, or --force to embed all again")
        diff = identity_differences(manifest, identity)
        if diff:
            raise PairkitError(
                f"store {cfg_store} was made with other options ({', '.join(diff)} differ); "
                "pass --force to replace it, or choose another -o"
            )
        writer = StoreWriter.resume(cfg_store)
        done = set(writer.items["source"].astype(str))
        same_image_root(cfg_store, writer.manifest.get("image_root"), sources, done)
        return writer, done
    if not (cfg.force and has_manifest(cfg_store)):
        prepare_store_dir(cfg_store, cfg.force)  # a killed run's leftovers cleared
    return None, set()


def identity_differences(manifest: dict[str, Any], identity: dict[str, Any]) -> list[str]:
    """The embedding options (keys) on which a run's ``identity`` and the store of
    ``manifest`` differ. ``image_size`` is the effective size: a side without it is at
    the model's own size, which the store's encoder record gives when that store was not
    resized (no ``image_size`` there), so ``--image-size`` equal to the model's own size
    and no option name the same store (one an earlier pairkit wrote with the size
    recorded too)."""
    old = manifest.get("embedding")
    old = old if isinstance(old, dict) else {}
    diff = sorted(k for k in set(identity) | set(old) if old.get(k) != identity.get(k))
    encoder = manifest.get("encoder")
    if "image_size" in diff and isinstance(encoder, dict) and "image_size" not in encoder:
        own = (encoder.get("preprocess") or {}).get("size")
        if own is not None and {old.get("image_size"), identity.get("image_size")} <= {
                None, own}:
            diff.remove("image_size")
    return diff


def recorded_preprocess(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The ``encoder.preprocess`` a store's manifest records (None when it has none)."""
    pre = (manifest.get("encoder") or {}).get("preprocess")
    return pre if isinstance(pre, dict) else None


def labels_text(kind: Any) -> str:
    """The manifest's ``labels`` in words (a refusal's)."""
    return {None: "no labels", "folder": "--labels folder", "file": "--labels FILE (a table)"
            }.get(kind, f"the shards' own labels ({kind})")


def embed_here(cfg: EmbedConfig, store: StoreOpener, todo: list[ImageFile],
               labels: dict[str, str | None], errors: list[dict[str, str]],
               summary: EmbedSummary, hook: ProgressHook, encoder: Encoder, device: str
               ) -> None:
    """The local loop: ``todo``'s batches through ``encoder`` on ``device``, held in a
    :class:`~pairkit.encode.shards.ShardBuffer` and committed to ``store``'s writer as
    shards that end at multiples of ``--shard-rows`` rounded down to whole images
    (:func:`~pairkit.encode.shards.shard_unit`; or sooner after ``--shard-seconds``); a
    new store is made at the first shard. ``errors`` and ``summary`` (images, views,
    decoded on device) grow as it goes. The Ray executor's ``embed`` takes the same
    arguments, the writer in place of ``store``."""
    import pandas as pd

    runner = Runner(encoder, device, cfg.precision)
    if note := workers_note(cfg, len(todo), device):
        hook.note(note)
    buffer = ShardBuffer()
    unit = shard_unit(cfg.shard_rows, cfg.views)  # whole images: no view left for later

    def flush(whole: bool = True) -> None:
        """Commit the rows held as shards that end at multiples of ``unit``
        (``whole=False``: only full ones, the rest stays held), so a resumed run cuts
        where a clean run does and gets the same store_id."""
        shards = buffer.take_shards(store.count, unit, whole)
        if not shards:
            return
        writer = store.get()
        writer.set_errors(errors)
        for vectors, items in shards:
            writer.append(vectors, pd.DataFrame(items))

    for batch in encode_batches(cfg, todo, labels, encoder, runner, device):
        buffer.add(batch)
        errors += batch.errors
        hook.advance(batch.images + len(batch.errors))
        held = buffer.pending()
        if held and buffer.seconds() > cfg.shard_seconds:
            flush()  # a slow encoder's rows are saved (at the cost of a boundary)
        elif held >= unit - store.count % unit:
            flush(whole=False)
    flush()
    summary.images += buffer.images
    summary.views += buffer.rows
    summary.decoded_on_device += buffer.on_device


def embed_partition(cfg: EmbedConfig, files: list[ImageFile], labels: dict[str, str | None],
                    encoder: Encoder, runner: Any, device: str, shard_name: str
                    ) -> dict[str, Any]:
    """Embed ``files`` (one partition) into one shard file ``shard_name`` of the store,
    written atomically but not committed (:meth:`StoreWriter.add_written_shard` does that).
    Returns ``{record (None when no file could be embedded), items, errors, images,
    on_device}``; what a Ray worker of :mod:`pairkit.distributed.embed` sends back."""
    from pairkit.core.store_writer import write_shard

    buffer = ShardBuffer()
    for batch in encode_batches(cfg, files, labels, encoder, runner, device):
        buffer.add(batch)
    vectors, items = buffer.take()
    record = write_shard(cfg.store, shard_name, vectors, cfg.dtype) if items else None
    return {"record": record, "items": items, "errors": buffer.errors,
            "images": buffer.images, "on_device": buffer.on_device}
