"""Numbers shared by the report's views: score statistics and histograms."""

from __future__ import annotations

from typing import Any

import numpy as np

HIST_BINS = 40
HIST_RANGE = (-1.0, 1.0)


def score_stats(values: np.ndarray) -> dict[str, Any]:
    """``n``, ``min``, ``q25``, ``median``, ``q75``, ``max``, ``mean`` of the finite values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return {"n": 0}
    q = np.quantile(v, [0.0, 0.25, 0.5, 0.75, 1.0])
    return {"n": int(len(v)), "min": float(q[0]), "q25": float(q[1]), "median": float(q[2]),
            "q75": float(q[3]), "max": float(q[4]), "mean": float(v.mean())}


def histogram(series: dict[str, np.ndarray], bins: int = HIST_BINS,
              value_range: tuple[float, float] = HIST_RANGE) -> dict[str, Any]:
    """Counts of each series in the same ``bins`` equal bins over ``value_range``.

    Values outside the range are counted in the first or last bin (cosine scores of
    float16 rows can pass 1 by ~1e-3). Returns ``{"edges": [...], "series":
    [{"name", "counts"}]}``; empty series are left out.
    """
    lo, hi = value_range
    edges = np.linspace(lo, hi, bins + 1)
    out = []
    for name, values in series.items():
        v = np.asarray(values, dtype=np.float64)
        v = np.clip(v[np.isfinite(v)], lo, hi)
        if not len(v):
            continue
        counts, _ = np.histogram(v, bins=edges)
        out.append({"name": name, "counts": counts.astype(int).tolist()})
    return {"edges": [round(float(e), 6) for e in edges], "series": out}
