"""``mutual-neighbour``: the candidate's source and the anchor's are mutual nearest
neighbours (some view of each among the other's ``neighbours`` nearest other-source rows,
in the partial PCA whitening of :mod:`pairkit.mine.whitening`): the relation the mined
positives come from, so an anchor's mined positive is never also its negative.

Why the source level: a planted near-copy's views are often no closer to the anchor than
a random view pair of its own source (heavy crops: cosine 0.7-0.9 on fm0-copies), so no
embedding threshold finds it, but some view pair of the two sources is mutual (238 of 240
planted copy pairs on fm0-copies; docs/benchmarks.md "Downstream").

Guard, as the cluster rule's: on a small store (a few dozen sources, each among the
other's 10 nearest of ~20) most pairs of sources are mutual neighbours, so the rule would
flag most candidates and hand most of the store out as mined positives, on pure noise as
well. So the share of a fixed seeded sample of random pairs of two sources
(:func:`pairkit.mine.rules.cluster.random_pairs`) that the rule would flag is measured
(:func:`guard`): above :data:`MAX_SHARE` the rule flags nothing and no mutual neighbour is
a mined positive, said in one line. On real-size stores the share is about the depth over
the sources (10 / 1,500: under 1%), far below."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.mine.fn_context import FnContext

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig

NAME = "mutual-neighbour"
REASON = "mutual_neighbour"
SIMILARITY = True
MAX_SHARE = 0.5  # as the cluster rule's cluster_max_share


def neighbour_lists(ctx: FnContext) -> tuple[np.ndarray, np.ndarray]:
    """The whitened lists: the caller's (mine computes them with its index options), else
    one exact search here (kept)."""
    if ctx.whitened_neighbours is None:
        from pairkit.mine.clusters import knn_graph
        from pairkit.mine.positives import DEFAULT_NEIGHBOURS
        from pairkit.mine.whitening import fit_whitening, whitened_neighbours

        def search(space: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            return knn_graph(space, ctx.sources, k, backend=ctx.backend)

        if ctx.principal is None:  # the cluster rule's graph starts from the same fit
            ctx.principal = fit_whitening(ctx.vectors, seed=ctx.seed)
        ctx.whitened_neighbours = whitened_neighbours(ctx.vectors, DEFAULT_NEIGHBOURS, search,
                                                      seed=ctx.seed, white=ctx.principal)
    return ctx.whitened_neighbours


def mutual_source_keys(ctx: FnContext) -> np.ndarray:
    """Sorted int64 keys ``a * n_sources + b`` of the ordered source pairs (a, b), a != b,
    with a mutual row pair between them (both orders present)."""
    if ctx.mutual_source_keys is None:
        from pairkit.core.unique import sorted_unique
        from pairkit.mine.positives import mutual_neighbours

        ids, _ = neighbour_lists(ctx)
        mutual = mutual_neighbours(ids)
        rows, cols = np.nonzero(mutual)
        n_src = int(ctx.sources.max()) + 1 if len(ctx.sources) else 1
        a, b = ctx.sources[rows], ctx.sources[ids[rows, cols]]
        a, b = a[a != b], b[a != b]
        ctx.mutual_source_keys = sorted_unique(np.concatenate([a * n_src + b, b * n_src + a]))
    return ctx.mutual_source_keys


def source_pair_share(ctx: FnContext, a: np.ndarray, b: np.ndarray) -> float:
    """The share of the row pairs ``(a, b)`` whose sources are mutual neighbours."""
    keys = mutual_source_keys(ctx)
    if len(a) == 0 or len(keys) == 0:
        return 0.0
    n_src = int(ctx.sources.max()) + 1
    want = ctx.sources[a] * n_src + ctx.sources[b]
    pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
    return float((keys[pos] == want).mean())


def guard(ctx: FnContext) -> dict[str, Any]:
    """``ctx.mutual_info`` with ``random_pair_share`` (the share of the cluster rule's fixed
    sample of random pairs of two sources that the rule would flag) and, above
    :data:`MAX_SHARE`, ``off`` (the summary's words); measured once, before the blocks
    and the label-free estimate (whose context shares the dict)."""
    from pairkit.core.shown import percent, percent_above
    from pairkit.mine.rules.cluster import random_pairs

    info = ctx.mutual_info
    if "random_pair_share" not in info:
        share = 0.0
        if ctx.count >= 2:
            a, b = random_pairs(ctx.count, ctx.sources, seed=ctx.seed)
            share = source_pair_share(ctx, a, b)
        info["random_pair_share"] = round(share, 4)
        if share > MAX_SHARE:
            info["off"] = (f"it would flag {percent_above(share, MAX_SHARE)} of random pairs "
                           f"(> {percent(MAX_SHARE)}): it flags nothing and mines no "
                           "positives")
    return info


def is_off(ctx: FnContext) -> bool:
    """Whether the guard turned the rule off on this store (:func:`guard`)."""
    return "off" in guard(ctx)


def prepare(ctx: FnContext, config: FalseNegativeConfig) -> None:
    mutual_source_keys(ctx)
    guard(ctx)


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: FalseNegativeConfig,
         positives: np.ndarray | list[np.ndarray] | None) -> np.ndarray:
    """(n, k) bool: the candidate's source is a mutual neighbour of the anchor's."""
    return flags_pairs(ctx, np.asarray(anchors)[:, None], cand)


def flags_pairs(ctx: FnContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bool, the shape of ``b``: whether the rule flags row ``b`` as a candidate of anchor
    row ``a`` (broadcast against ``b``; ``b`` -1: no row, False): their sources are mutual
    neighbours, and the guard left the rule on."""
    keys = mutual_source_keys(ctx)
    valid = b >= 0
    if len(keys) == 0 or b.size == 0 or is_off(ctx):
        return np.zeros(b.shape, dtype=bool)
    n_src = int(ctx.sources.max()) + 1
    want = ctx.sources[a] * n_src + ctx.sources[np.maximum(b, 0)]
    pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
    return valid & (keys[pos] == want)
