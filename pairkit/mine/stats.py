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


def summary_stats(result: MineResult, K: int, hard: bool) -> dict[str, Any]:
    """JSON-ready statistics: anchors, negatives per anchor, score quantiles, rank
    histogram, candidates removed by each rule, FN flags per rule."""
    p = result.pairs
    found = p.neg_ids >= 0
    every = bool(found.all())  # every anchor has its K (no sum along the short axis)
    per = (np.full(len(found), found.shape[1], np.int64) if every
           else found.sum(axis=1, dtype=np.int64))  # p.negatives_per_anchor
    neg = p.neg_scores.reshape(-1) if every else p.neg_scores[found]
    qs = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)

    def quant(x: np.ndarray) -> dict[str, float] | None:
        if len(x) == 0:
            return None
        # the float64 copy is ours: np.quantile may partition it in place (no 2nd copy)
        values = np.quantile(x.astype(np.float64), qs, overwrite_input=True)
        return {f"q{int(q * 100):02d}": round(float(v), 6)
                for q, v in zip(qs, values, strict=True)}

    hist = np.bincount(per, minlength=K + 1)
    stats: dict[str, Any] = {
        "anchors": int(len(p.anchors)),
        "anchors_short": int((per < K).sum()),
        "anchors_without_negatives": int((per == 0).sum()),
        "negatives": int(per.sum()),
        "negatives_per_anchor": {
            "mean": round(float(per.mean()), 4) if len(per) else 0.0,
            "min": int(per.min()) if len(per) else 0,
            "max": int(per.max()) if len(per) else 0,
            "histogram": {str(i): int(c) for i, c in enumerate(hist)},
        },
        "pos_score": quant(p.pos_scores),
        "neg_score": quant(neg),
        "removed": dict(result.removed),
        "fn_flagged": dict(sorted(result.fn_flagged.items())),
        "attracted": int(len(p.fn_ids)) if p.fn_ids is not None else 0,
        "retries": result.retries,
        "anchors_retried": result.anchors_retried,
        "k_initial": result.k_initial,
        "k_max": result.k_max,
    }
    if hard:
        ranks = p.neg_ranks.reshape(-1) if every else p.neg_ranks[found]
        edges = [*RANK_BINS, max(RANK_BINS[-1] + 1, int(ranks.max()) + 1 if len(ranks) else 0)]
        h = rank_histogram(ranks, edges)
        stats["rank_histogram"] = {
            (f"{a}" if b - a == 1 else f"{a}-{b - 1}"): int(c)
            for a, b, c in zip(edges[:-1], edges[1:], h, strict=True)
        }
    return stats



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

    codes, _ = codes_of(labels)
    ok = pairs.neg_ids >= 0
    a = np.broadcast_to(codes[pairs.anchors][:, None], ok.shape)[ok]
    c = codes[np.maximum(pairs.neg_ids, 0)][ok]
    both = (a >= 0) & (c >= 0)
    return round(float((a[both] == c[both]).mean()), 4) if both.any() else None
