"""Project a store through a trained head into a new store (same items, new vectors)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from pairkit.core.store import DTYPES, Store, sha256_file
from pairkit.core.store_writer import write_store
from pairkit.errors import PairkitError
from pairkit.train.head import WEIGHTS, Head, load_head


@dataclass(frozen=True)
class ProjectResult:
    """Rows written, dims in and out, and whether the head finished training."""

    count: int
    in_dim: int
    out_dim: int
    head_complete: bool


def project_vectors(store: Store, head: Head, device: str = "cpu",
                    batch_size: int = 65536) -> np.ndarray:
    """The store's vectors through ``head``: float32 (N, out_dim), rows L2-normalised.

    Streams the store block by block; raises PairkitError when dims differ.
    """
    if head.in_dim != store.dim:
        raise PairkitError(
            f"head {head.path} takes vectors of dim {head.in_dim}, store {store.root} has dim "
            f"{store.dim}: train a head on this store's encoder"
        )
    out = np.empty((store.count, head.out_dim), dtype=np.float32)
    for start, block in store.iter_blocks(rows=batch_size):
        out[start : start + len(block)] = head.apply(block, device=device, batch_size=batch_size)
    return out


def project_store(store_path: str | os.PathLike[str], head_path: str | os.PathLike[str],
                  output: str | os.PathLike[str], *, device: str = "auto",
                  batch_size: int = 65536, dtype: str | None = None,
                  force: bool = False) -> ProjectResult:
    """Write ``store`` projected by ``head`` as a new store at ``output``.

    The manifest keeps the encoder and records the head (path, weights sha256,
    config) under ``encoder.head`` and ``projected``.
    """
    from pairkit.core.devices import resolve_device
    from pairkit.core.paths import check_output_apart
    from pairkit.train.head import read_head_config

    if batch_size < 1:
        raise PairkitError(f"--batch-size must be >= 1, got {batch_size}")
    if dtype is not None and dtype not in DTYPES:
        raise PairkitError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype}")
    # wrong paths are refused before the store's vectors and torch load
    check_output_apart(output, [store_path, head_path])
    read_head_config(head_path)
    store = Store.open(store_path)
    head = load_head(head_path)
    dev = resolve_device(device)
    vectors = project_vectors(store, head, device=dev, batch_size=batch_size)
    head_record = {
        "path": str(head.path),
        "weights_sha256": sha256_file(head.path / WEIGHTS),
        "head": head.config.get("head"),
        "loss": head.config.get("loss"),
        "trained_on": (head.config.get("store") or {}).get("content_id"),
        "complete": head.complete,
    }
    encoder = dict(store.encoder)
    encoder["head"] = head_record
    write_store(output, vectors, store.items, encoder=encoder, dtype=dtype or store.dtype,
                force=force,
                extra={"projected": {"from_store": str(store.root),
                                     "from_content_id": store.content_id, **head_record},
                       "views": store.manifest.get("views"), "seed": store.manifest.get("seed")})
    return ProjectResult(store.count, head.in_dim, head.out_dim, head.complete)
