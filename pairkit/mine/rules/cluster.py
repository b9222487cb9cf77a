"""``cluster``: the candidate shares the anchor's cluster in at least
``cluster_votes`` of several seeded spectral-clustering runs (consensus
clustering, "evidence accumulation", Fred & Jain 2005).

Why this form: on real embeddings a class is a broad, often stretched region, not
a tight neighbourhood (with an ImageNet CNN on Fashion-MNIST, half of the 300th
nearest neighbours still share the anchor's class), so local rules (k-reciprocal
sets, rank windows, small kNN communities) leave most false negatives in.
Clusters of about class size catch them. The clusters are found in the spectral
embedding of the kNN graph (:mod:`pairkit.mine.spectral`), which follows curved
class regions that k-means on the raw vectors cuts by style; one k-means run
cuts at arbitrary borders, so a candidate that shares the anchor's cluster in
*any* of a few seeded runs is flagged (the border cases). The number of clusters
is read off the graph's spectrum unless ``cluster_ks`` gives it. Measurements:
docs/benchmarks.md, "False negatives on real images".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.mine.fn_context import FnContext

NAME = "cluster"
REASON = "cluster"
SIMILARITY = True


def embedding(ctx: FnContext, config: Any) -> Any:
    """The spectral embedding of the store's kNN graph (computed once)."""
    from pairkit.mine.spectral import spectral_embedding

    if "spectral" not in ctx.cache:
        ctx.cache["spectral"] = spectral_embedding(
            ctx.vectors, ctx.sources, m=config.cluster_neighbors, seed=ctx.seed)
    return ctx.cache["spectral"]


def cluster_ks(ctx: FnContext, config: Any) -> tuple[int, ...]:
    """The cluster counts of the runs: the config's (capped at N), else the number of
    graph eigenvalues >= ``cluster_eigen_threshold`` (recorded in ``ctx.cluster_info``)."""
    n = ctx.count
    if config.cluster_ks:
        ctx.cluster_info.setdefault("k", [min(n, k) for k in config.cluster_ks])
        ctx.cluster_info.setdefault("auto", False)
        return tuple(min(n, k) for k in config.cluster_ks)
    if "k" not in ctx.cluster_info:
        emb = embedding(ctx, config)
        k = emb.cluster_count(config.cluster_eigen_threshold)
        ctx.cluster_info.update(
            k=[k], auto=True,
            eigenvalues=[round(float(v), 4) for v in emb.eigenvalues[: k + 4]])
    return tuple(ctx.cluster_info["k"])


def assignments(ctx: FnContext, config: Any) -> np.ndarray:
    """(G, N) int64: cluster of each item in each run (G = len(ks) x runs)."""
    from pairkit.mine.spectral import cluster_runs

    if ctx.cluster_assign is not None and "cluster_key" not in ctx.cache:
        return ctx.cluster_assign  # set by hand
    ks = cluster_ks(ctx, config)
    key = (ks, config.cluster_runs, config.cluster_niter)
    if ctx.cache.get("cluster_key") != key:
        emb = embedding(ctx, config)
        parts = [cluster_runs(emb, k, config.cluster_runs, seed=ctx.seed + 7919 * g,
                              niter=config.cluster_niter, backend=ctx.backend)
                 for g, k in enumerate(ks)]
        ctx.cluster_assign = (np.concatenate(parts) if parts
                              else np.zeros((0, ctx.count), np.int64))
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
