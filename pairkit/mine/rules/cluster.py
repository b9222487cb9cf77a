"""``cluster``: the candidate shares the anchor's spherical k-means cluster in at
least ``cluster_votes`` of several seeded runs (consensus clustering, "evidence
accumulation", Fred & Jain 2005).

Why this form: on real embeddings a class is a broad region, not a tight
neighbourhood (with an ImageNet CNN on Fashion-MNIST, half of the 300th nearest
neighbours still share the anchor's class), so local rules (k-reciprocal sets,
rank windows, small communities) leave most false negatives in. Clusters of
about class size catch them; one k-means run cuts classes at arbitrary borders,
and flagging a candidate that shares the anchor's cluster in *any* of a few
seeded runs covers the border cases (docs/benchmarks.md, "False negatives on
real images"). ``cluster_ks`` empty = the number of clusters is chosen per
store, label-free, as the most stable k-means partition (Lange et al. 2004;
:func:`pairkit.mine.clusters.stable_cluster_count`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.mine.fn_context import FnContext

NAME = "cluster"
REASON = "cluster"
SIMILARITY = True


def reduced(ctx: FnContext, config: Any) -> np.ndarray:
    """The vectors the k-means runs see: their ``cluster_dims`` leading principal
    components (all dimensions when 0)."""
    from pairkit.mine.clusters import pca_reduce

    if "cluster_x" not in ctx.cache:
        dims = config.cluster_dims
        ctx.cache["cluster_x"] = (pca_reduce(ctx.vectors, dims, seed=ctx.seed) if dims
                                  else ctx.vectors)
    return ctx.cache["cluster_x"]


def cluster_ks(ctx: FnContext, config: Any) -> tuple[int, ...]:
    """The cluster counts of the runs: the config's (capped at N), else the most
    stable count for this store (recorded in ``ctx.cluster_info``)."""
    from pairkit.mine.clusters import stable_cluster_count

    n = ctx.count
    if config.cluster_ks:
        ctx.cluster_info.setdefault("k", [min(n, k) for k in config.cluster_ks])
        ctx.cluster_info.setdefault("auto", False)
        return tuple(min(n, k) for k in config.cluster_ks)
    if "k" not in ctx.cluster_info:
        k, table = stable_cluster_count(reduced(ctx, config), seed=ctx.seed,
                                        niter=config.cluster_niter, backend=ctx.backend)
        ctx.cluster_info.update(k=[k], auto=True, stability=table)
    return tuple(ctx.cluster_info["k"])


def assignments(ctx: FnContext, config: Any) -> np.ndarray:
    """(G, N) int64: cluster of each item in each run (G = len(ks) x runs)."""
    from pairkit.mine.clusters import spherical_kmeans

    if ctx.cluster_assign is not None and "cluster_key" not in ctx.cache:
        return ctx.cluster_assign  # set by hand
    ks = cluster_ks(ctx, config)
    key = (ks, config.cluster_runs, config.cluster_niter)
    if ctx.cache.get("cluster_key") != key:
        rows = [
            spherical_kmeans(reduced(ctx, config), k, seed=ctx.seed + 7919 * g + r,
                             niter=config.cluster_niter, backend=ctx.backend)[0]
            for g, k in enumerate(ks) for r in range(config.cluster_runs)
        ]
        ctx.cluster_assign = np.stack(rows) if rows else np.zeros((0, ctx.count), np.int64)
        ctx.cache["cluster_key"] = key
    return ctx.cluster_assign


def prepare(ctx: FnContext, config: Any) -> None:
    assignments(ctx, config)


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: Any, positives: Any) -> np.ndarray:
    """(n, k) bool: candidate in the anchor's cluster in >= ``cluster_votes`` runs."""
    assign = assignments(ctx, config)
    safe = np.maximum(cand, 0)
    votes = np.zeros(cand.shape, dtype=np.int32)
    for g in range(assign.shape[0]):
        votes += assign[g][anchors][:, None] == assign[g][safe]
    need = min(config.cluster_votes, max(assign.shape[0], 1))
    return (cand >= 0) & (votes >= need)
