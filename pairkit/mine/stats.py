"""The statistics of a mining run (the JSON of ``--stats``; :mod:`pairkit.mine.summary`
turns them into lines for a person)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.pairs import MinedPairs
from pairkit.mine.blocks import MineResult

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.fn_context import FnContext

RANK_BINS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000)


QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)  # of the scores in the stats


def summary_stats(result: MineResult, K: int, hard: bool) -> dict[str, Any]:
    """JSON-ready statistics: anchors, negatives per anchor, score quantiles, rank
    histogram, candidates removed by each rule, FN flags per rule."""
    p = result.pairs
    found = p.neg_ids >= 0
    every = bool(found.all())  # every anchor has its K (no sum along the short axis)
    per = (np.full(len(found), found.shape[1], np.int64) if every
           else found.sum(axis=1, dtype=np.int64))  # p.negatives_per_anchor
    neg = p.neg_scores.reshape(-1) if every else p.neg_scores[found]

    def quantiles(x: np.ndarray) -> np.ndarray | None:
        # the float64 copy is ours: np.quantile may partition it in place (no 2nd copy)
        return (np.quantile(x.astype(np.float64), QUANTILES, overwrite_input=True)
                if len(x) else None)

    stats = run_record(np.bincount(per, minlength=K + 1), K, quantiles(p.pos_scores),
                       quantiles(neg), result,
                       int(len(p.fn_ids)) if p.fn_ids is not None else 0, result.k_initial)
    if hard:
        ranks = p.neg_ranks.reshape(-1) if every else p.neg_ranks[found]
        top = int(ranks.max()) if len(ranks) else -1
        stats["rank_histogram"] = rank_record(rank_histogram(ranks, rank_edges(top)), top)
    return stats


def run_record(hist: np.ndarray, K: int, pos_quantiles: Any, neg_quantiles: Any,
               counts: Any, attracted: int, k_initial: int) -> dict[str, Any]:
    """The stats of a run from ``hist`` (anchors with 0 .. K negatives), the scores'
    :data:`QUANTILES` (None: no scores), and ``counts`` (``removed``, ``fn_flagged``,
    ``retries``, ``anchors_retried``, ``k_max``: a :class:`MineResult` or the blocks'
    sum): the one layout of :func:`summary_stats` and of ``mine --ray``'s parts."""
    n = int(hist.sum())
    present = np.flatnonzero(hist)
    negatives = int((np.arange(len(hist)) * hist).sum())
    return {
        "anchors": n,
        "anchors_short": int(hist[:K].sum()),
        "anchors_without_negatives": int(hist[0]),
        "negatives": negatives,
        "negatives_per_anchor": {
            "mean": round(negatives / n, 4) if n else 0.0,
            "min": int(present[0]) if n else 0,
            "max": int(present[-1]) if n else 0,
            "histogram": {str(i): int(c) for i, c in enumerate(hist)},
        },
        "pos_score": quantile_record(pos_quantiles),
        "neg_score": quantile_record(neg_quantiles),
        "removed": dict(counts.removed),
        "fn_flagged": dict(sorted(counts.fn_flagged.items())),
        "attracted": attracted,
        "retries": counts.retries,
        "anchors_retried": counts.anchors_retried,
        "k_initial": k_initial,
        "k_max": counts.k_max,
    }


def quantile_record(values: Any) -> dict[str, float] | None:
    """``{"q00": ..., "q05": ..., ...}`` of the :data:`QUANTILES` ``values`` (None: none)."""
    if values is None:
        return None
    return {f"q{int(q * 100):02d}": round(float(v), 6)
            for q, v in zip(QUANTILES, values, strict=True)}


def rank_edges(top: int) -> list[int]:
    """The rank histogram's bin edges: :data:`RANK_BINS`, the last bin open up to the
    largest rank ``top`` (-1: none)."""
    return [*RANK_BINS, max(RANK_BINS[-1] + 1, top + 1)]


def rank_record(counts: np.ndarray, top: int) -> dict[str, int]:
    """The rank histogram of the stats: ``counts`` per bin of :func:`rank_edges`."""
    edges = rank_edges(top)
    return {(f"{a}" if b - a == 1 else f"{a}-{b - 1}"): int(c)
            for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)}


def rank_histogram(ranks: np.ndarray, edges: list[int]) -> np.ndarray:
    """``np.histogram(ranks, bins=edges)[0]`` for ranks >= 0 below the last edge (every
    bin ``[a, b)``), by one count per rank instead of a sort."""
    if len(ranks) == 0:
        return np.zeros(len(edges) - 1, dtype=np.int64)
    below = np.concatenate([[0], np.cumsum(np.bincount(ranks, minlength=edges[-1]))])
    return np.diff(below[np.asarray(edges)])


def cluster_stats(ctx: FnContext | None, fn_config: FalseNegativeConfig
                  ) -> dict[str, Any] | None:
    """What the cluster rule chose: number of clusters (auto or given), the leading
    eigenvalues it was read from, runs and votes."""
    info = getattr(ctx, "cluster_info", None)
    if not info:
        return None
    shown = {k: v for k, v in info.items() if k != "votes_for"}
    return {"runs": fn_config.cluster_runs, "votes": fn_config.cluster_votes, **shown}


def same_label_share(pairs: MinedPairs, labels: np.ndarray) -> float | None:
    """Share of mined negatives whose label equals their anchor's (both labeled):
    the exact false-negative share where labels define "the same thing"."""
    from pairkit.core.store import codes_of

    return label_share(*same_label_counts(pairs, codes_of(labels)[0]))


def same_label_record(pairs: MinedPairs, labels: np.ndarray) -> dict[str, Any]:
    """The stats' ``negatives_same_label`` (:func:`same_label_share`) and
    ``negatives_labelled`` (the negatives it is over: both ends labelled)."""
    from pairkit.core.store import codes_of

    return label_record(*same_label_counts(pairs, codes_of(labels)[0]))


def label_record(same: int, both: int) -> dict[str, Any]:
    """``negatives_same_label`` (``same / both``, None without a labelled pair) and
    ``negatives_labelled`` (``both``): the summary says what the share is over when
    that is not every negative."""
    return {"negatives_same_label": label_share(same, both), "negatives_labelled": both}


def same_label_counts(pairs: Any, codes: np.ndarray) -> tuple[int, int]:
    """(negatives whose label code equals their anchor's, negatives where both are
    labelled; codes -1: no label)."""
    ok = pairs.neg_ids >= 0
    a = np.broadcast_to(codes[pairs.anchors][:, None], ok.shape)[ok]
    return pair_label_counts(a, codes[np.maximum(pairs.neg_ids, 0)][ok])


def pair_label_counts(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(pairs whose label codes ``a`` and ``b`` are equal, pairs where both are
    labelled); codes -1: no label."""
    both = (a >= 0) & (b >= 0)
    return int((a[both] == b[both]).sum()), int(both.sum())


def label_share(same: int, both: int) -> float | None:
    """``same / both`` rounded as the stats give it (None: no labelled negative)."""
    return round(same / both, 4) if both else None
