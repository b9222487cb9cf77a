"""``mutual-neighbour``: the candidate's source and the anchor's are mutual nearest
neighbours (some view of each among the other's ``neighbours`` nearest other-source rows,
in the partial PCA whitening of :mod:`pairkit.mine.whitening`): the relation the mined
positives come from, so an anchor's mined positive is never also its negative.

Why the source level: a planted near-copy's views are often no closer to the anchor than
a random view pair of its own source (heavy crops: cosine 0.7-0.9 on fm0-copies), so no
embedding threshold finds it, but some view pair of the two sources is mutual (238 of 240
planted copy pairs on fm0-copies; docs/benchmarks.md "Downstream")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pairkit.mine.fn_context import FnContext

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig

NAME = "mutual-neighbour"
REASON = "mutual_neighbour"
SIMILARITY = True


def neighbour_lists(ctx: FnContext) -> tuple[np.ndarray, np.ndarray]:
    """The whitened lists: the caller's (mine computes them with its index options), else
    one exact search here (kept)."""
    if ctx.whitened_neighbours is None:
        from pairkit.mine.clusters import knn_graph
        from pairkit.mine.positives import DEFAULT_NEIGHBOURS
        from pairkit.mine.whitening import whitened_neighbours

        def search(space: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            return knn_graph(space, ctx.sources, k, backend=ctx.backend)

        ctx.whitened_neighbours = whitened_neighbours(ctx.vectors, DEFAULT_NEIGHBOURS, search,
                                                      seed=ctx.seed)
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


def prepare(ctx: FnContext, config: FalseNegativeConfig) -> None:
    mutual_source_keys(ctx)


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: FalseNegativeConfig,
         positives: np.ndarray | list[np.ndarray] | None) -> np.ndarray:
    """(n, k) bool: the candidate's source is a mutual neighbour of the anchor's."""
    keys = mutual_source_keys(ctx)
    valid = cand >= 0
    if len(keys) == 0 or cand.size == 0:
        return np.zeros(cand.shape, dtype=bool)
    n_src = int(ctx.sources.max()) + 1
    want = ctx.sources[anchors][:, None] * n_src + ctx.sources[np.maximum(cand, 0)]
    pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
    return valid & (keys[pos] == want)
