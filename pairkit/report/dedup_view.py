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

# per group, besides its kept item; the rest is counted, not shown (nor given a thumbnail)
MAX_COPIES_SHOWN = 64


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
        out["mixed_label_groups"] = int((label_counts(g, labels) > 1).sum())
    return out


def label_counts(g: pd.DataFrame, labels: np.ndarray) -> pd.Series:
    """Per group, how many different labels its members have (missing labels not counted)."""
    lab = labels[g["id"].to_numpy()]
    frame = g[["group"]].assign(label=[None if v is None else str(v) for v in lab])
    return frame.dropna().groupby("group")["label"].nunique()


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
    in each group the kept item first, then at most :data:`MAX_COPIES_SHOWN` copies, least
    similar first (the doubtful ones; no similarity last), table order among equals.

    Per group: ``g`` number, ``m`` [[item, keep, similarity, match]] (only the members shown
    get an item, hence a thumbnail), ``n`` members in all, ``more`` copies not shown, ``x``
    the match kinds of all its copies and, with labels, ``mixed`` (1: more than one label
    among all its members), so the page's filters see the whole group."""
    g = normalize_groups(table)
    summary = summarize_groups(g, labels)
    sizes = g.groupby("group").size()
    order = sorted(sizes.index.tolist(), key=lambda k: (-int(sizes[k]), int(k)))
    if sample > 0:
        order = order[:sample]
    summary["groups_shown"] = len(order)
    shown = g[g["group"].isin(order)].sort_values(
        ["group", "keep", "similarity"], ascending=[True, False, True], kind="stable",
        na_position="last")
    mixed = label_counts(shown, labels) if labels is not None and len(shown) else None
    by_group = {k: f for k, f in shown.groupby("group", sort=False)}
    groups = []
    for k in order:
        f = by_group[k]
        keep = f["keep"].to_numpy(dtype=bool)
        copies = int((~keep).sum())
        cut = f.iloc[:int(keep.sum()) + min(copies, MAX_COPIES_SHOWN)]
        members = []
        for item, path, kept, sim, match in cut[
                ["id", "path", "keep", "similarity", "match"]].itertuples(index=False, name=None):
            s = float(sim)
            members.append([ref(int(item), path), 1 if kept else 0,
                            round(s, 5) if np.isfinite(s) else None, match])
        group: dict[str, Any] = {
            "g": int(k), "m": members, "n": int(len(f)),
            "more": copies - (len(cut) - int(keep.sum())),
            "x": sorted({str(m) for m in f["match"].to_numpy(dtype=object)[~keep]
                         if m is not None})}
        if mixed is not None:
            group["mixed"] = 1 if int(mixed.get(k, 0)) > 1 else 0
        groups.append(group)
    return {"kind": "dedup", "name": name, "summary": summary, "groups": groups}
