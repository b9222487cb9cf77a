"""``pairkit project`` from a store folder and a head folder to a new store (the command's
store-to-files step): :func:`project_to_files`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pairkit.errors import PairkitError
from pairkit.train.project import ProjectResult


@dataclass(frozen=True)
class ProjectConfig:
    """Options of ``pairkit project``: the head folder, where it runs, rows per block, the
    new store's precision (None: the input's)."""

    head: str | os.PathLike[str]
    device: str = "auto"
    batch_size: int = 65536
    dtype: str | None = None


def project_to_files(store: str | os.PathLike[str], output: str | os.PathLike[str],
                     cfg: ProjectConfig, *, force: bool = False) -> ProjectResult:
    """Write the store at ``store`` projected by the head ``cfg.head`` as a new store at
    ``output`` (:func:`pairkit.train.project.project_vectors`).

    The manifest keeps the encoder and records the head (path, weights sha256,
    config) under ``encoder.head`` and ``projected``.
    """
    from pairkit.core.devices import resolve_device
    from pairkit.core.manifest import check_store_dtype
    from pairkit.core.paths import check_folder_output, check_output_apart
    from pairkit.core.remote import is_url, location
    from pairkit.core.store import Store, sha256_file
    from pairkit.core.store_writer import check_store_dir, write_store
    from pairkit.encode.item_images import image_column_of
    from pairkit.train.head import WEIGHTS, check_head_encoder, load_head, read_head_config
    from pairkit.train.output_whitening import FILE as WHITENING_FILE
    from pairkit.train.project import check_head_dim, project_vectors

    if cfg.batch_size < 1:
        raise PairkitError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    if cfg.dtype is not None:
        check_store_dtype(cfg.dtype)
    # wrong paths are refused before the store's vectors and torch load
    check_folder_output(output, "-o", "a store is a folder")
    check_output_apart(output, [store, cfg.head])
    if not is_url(output):
        check_store_dir(Path(location(output)), force)  # before torch and every row
    head_root, head_config, spec = read_head_config(cfg.head)
    st = Store.open(store)
    # the dims first: a head of another dim can't apply, whatever the encoder records say
    check_head_dim(head_root, spec.in_dim, st)  # before torch loads the weights
    check_head_encoder(head_root, head_config, st.encoder, str(store))
    head = load_head(cfg.head)
    dev = resolve_device(cfg.device)
    vectors = project_vectors(st, head, device=dev, batch_size=cfg.batch_size)
    head_record = {
        "path": str(head.path),
        "weights_sha256": sha256_file(head.path / WEIGHTS),
        "head": head.config.get("head"),
        "whitening": head.config.get("whitening"),
        **({"whitening_sha256": sha256_file(head.path / WHITENING_FILE)}
           if head.whitening is not None else {}),
        "loss": head.config.get("loss"),
        "trained_on": (head.config.get("store") or {}).get("content_id"),
        "complete": head.complete,
    }
    encoder = dict(st.encoder)
    column = image_column_of(st)
    encoder["head"] = head_record
    write_store(output, vectors, st.items, encoder=encoder, dtype=cfg.dtype or st.dtype,
                force=force,
                extra={"projected": {"from_store": str(st.root),
                                     "from_content_id": st.content_id, **head_record,
                                     # a dataset store's --image-column: pair_loader reads
                                     # the items' images from it (embedding is not kept)
                                     **({"image_column": column} if column else {})},
                       "views": st.manifest.get("views"), "seed": st.manifest.get("seed"),
                       # the same items: their images and labels are where they were
                       **{k: st.manifest[k] for k in ("image_root", "labels")
                          if st.manifest.get(k) is not None}})
    return ProjectResult(st.count, head.in_dim, head.out_dim, head.complete)
