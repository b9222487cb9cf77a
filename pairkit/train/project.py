"""A store's vectors through a trained head (``pairkit project`` writes them as a new store:
:mod:`pairkit.train.project_command`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pairkit.core.store import Store
from pairkit.errors import PairkitError
from pairkit.train.head import Head


@dataclass(frozen=True)
class ProjectResult:
    """Rows written, dims in and out, and whether the head finished training."""

    count: int
    in_dim: int
    out_dim: int
    head_complete: bool


def check_head_dim(head_path: object, in_dim: int, store: Store) -> None:
    """PairkitError when a head taking vectors of ``in_dim`` (its config's, known before
    its weights load) can't project ``store``'s vectors."""
    if in_dim != store.dim:
        raise PairkitError(
            f"head {head_path} takes vectors of dim {in_dim}, store {store.root} has dim "
            f"{store.dim}: train a head on this store's encoder"
        )


def project_vectors(store: Store, head: Head, device: str = "cpu",
                    batch_size: int = 65536) -> np.ndarray:
    """The store's vectors through ``head``: float32 (N, out_dim), rows L2-normalised.

    Streams the store block by block; raises PairkitError when dims differ.
    """
    check_head_dim(head.path, head.in_dim, store)
    out = np.empty((store.count, head.out_dim), dtype=np.float32)
    for start, block in store.iter_blocks(rows=batch_size):
        out[start : start + len(block)] = head.apply(block, device=device, batch_size=batch_size)
    return out
