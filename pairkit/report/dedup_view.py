"""The dedup view: near-duplicate groups, kept vs dropped, largest groups first.

Reads the table ``pairkit dedup`` writes (docs/dedup.md): ``group``, ``id``,
``path``, ``keep``, ``similarity``, ``match``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.report.items import ItemRef
from pairkit.report.summary import histogram, score_stats

if TYPE_CHECKING:
    import pandas as pd


def _bools(series: Any) -> np.ndarray:
    if series.dtype == bool:
        return series.to_numpy(dtype=bool)
    return np.array([str(v).strip().lower() in ("true", "1", "1.0", "yes")
                     for v in series.to_numpy(dtype=object)], dtype=bool)


def normalize_groups(table: pd.DataFrame) -> pd.DataFrame:
    """group, id, path, keep, similarity, match; ``match`` filled in when absent."""
    import pandas as pd

    t = table.reset_index(drop=True)
    keep = _bools(t["keep"])
    out = pd.DataFrame({
        "group": pd.to_numeric(t["group"], errors="coerce").fillna(-1).astype(np.int64),
        "id": pd.to_numeric(t["id"], errors="coerce").fillna(-1).astype(np.int64),
        "path": t["path"].to_numpy(dtype=object) if "path" in t.columns else None,
        "keep": keep,
        "similarity": (pd.to_numeric(t["similarity"], errors="coerce")
                       if "similarity" in t.columns else np.nan),
    })
    if "match" in t.columns:
        out["match"] = [None if m is None or (isinstance(m, float) and np.isnan(m)) else str(m)
                        for m in t["match"].to_numpy(dtype=object)]
    else:
        out["match"] = np.where(keep, "keep", "near")
    return out[out["group"] >= 0]


def summarize_groups(g: pd.DataFrame, labels: np.ndarray | None) -> dict[str, Any]:
    """Counts, similarity statistics of the copies and, with labels, mixed-label groups."""
    sizes = g.groupby("group").size()
    dropped = g[~g["keep"]]
    out: dict[str, Any] = {
        "groups": int(len(sizes)), "members": int(len(g)), "drop": int(len(dropped)),
        "exact": int((g["match"] == "exact").sum()), "near": int((g["match"] == "near").sum()),
        "largest": int(sizes.max()) if len(sizes) else 0,
        "sizes": {str(k): int(v) for k, v in sizes.value_counts().sort_index().items()},
        "similarity": score_stats(dropped["similarity"].to_numpy(dtype=np.float64)),
        "hist": histogram({"copies (similarity to the kept item)":
                           dropped["similarity"].to_numpy(dtype=np.float64)},
                          value_range=_range(dropped["similarity"].to_numpy(dtype=np.float64))),
    }
    if labels is not None and len(g):
        lab = labels[g["id"].to_numpy()]
        frame = g[["group"]].assign(label=[None if v is None else str(v) for v in lab])
        mixed = frame.dropna().groupby("group")["label"].nunique()
        out["mixed_label_groups"] = int((mixed > 1).sum())
    return out


def _range(values: np.ndarray) -> tuple[float, float]:
    """Histogram range of the copies' similarities: from a round value below the lowest
    one to 1 (they all sit near the threshold)."""
    v = values[np.isfinite(values)]
    lo = float(np.floor(v.min() * 20) / 20) if len(v) else 0.9
    lo = min(lo, 0.95)
    return (max(-1.0, lo), 1.0)


def build_dedup_section(name: str, table: pd.DataFrame, *, sample: int,
                        labels: np.ndarray | None, ref: ItemRef) -> dict[str, Any]:
    """The page data of one dedup table: at most ``sample`` groups (0: all), largest first;
    in each group the kept item first, then the copies by similarity."""
    g = normalize_groups(table)
    summary = summarize_groups(g, labels)
    sizes = g.groupby("group").size()
    order = sorted(sizes.index.tolist(), key=lambda k: (-int(sizes[k]), int(k)))
    if sample > 0:
        order = order[:sample]
    summary["groups_shown"] = len(order)
    shown = g[g["group"].isin(order)].sort_values(
        ["group", "keep", "similarity"], ascending=[True, False, False], kind="stable")
    by_group = {k: f for k, f in shown.groupby("group", sort=False)}
    groups = []
    for k in order:
        members = []
        for item, path, keep, sim, match in by_group[k][
                ["id", "path", "keep", "similarity", "match"]].itertuples(index=False, name=None):
            s = float(sim)
            members.append([ref(int(item), path), 1 if keep else 0,
                            round(s, 5) if np.isfinite(s) else None, match])
        groups.append({"g": int(k), "m": members})
    return {"kind": "dedup", "name": name, "summary": summary, "groups": groups}
