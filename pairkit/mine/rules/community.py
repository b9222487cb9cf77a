"""``community``: the candidate is in the anchor's community of the kNN graph
(weighted label propagation over each item's nearest other sources, Raghavan,
Albert & Kumara 2007); communities adapt to unequal class sizes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pairkit.mine.fn_context import FnContext, knn_neighbours

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig

NAME = "community"
REASON = "community"
SIMILARITY = True


def communities(ctx: FnContext, config: FalseNegativeConfig) -> np.ndarray:
    """(N,) int64 community of each item (computed once)."""
    from pairkit.mine.clusters import label_propagation

    if ctx.communities is None:
        nb, w = knn_neighbours(ctx, config.community_neighbours)
        ctx.communities = label_propagation(
            np.asarray(nb, dtype=np.int64), np.asarray(w, dtype=np.float32),
            iters=config.community_iters, seed=ctx.seed,
        )
    return ctx.communities


def prepare(ctx: FnContext, config: FalseNegativeConfig) -> None:
    communities(ctx, config)


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: FalseNegativeConfig,
         positives: np.ndarray | list[np.ndarray] | None) -> np.ndarray:
    """(n, k) bool. Label propagation can flood a weakly separated graph into one
    giant community; a community holding more than ``community_max_share`` of the
    items says nothing about "same thing", so its anchors get no flags here."""
    comm = communities(ctx, config)
    sizes = np.bincount(comm, minlength=int(comm.max()) + 1 if len(comm) else 0)
    trusted = sizes[comm[anchors]] <= config.community_max_share * len(comm)
    same = comm[anchors][:, None] == comm[np.maximum(cand, 0)]
    return (cand >= 0) & same & trusted[:, None]
