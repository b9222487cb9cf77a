"""The search view: each query of a ``pairkit search`` table with its neighbours, nearest
first (docs/search.md: store_id, query, query_kind, rank, id, score, path, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.report.items import ItemRef
from pairkit.report.summary import histogram, score_stats

if TYPE_CHECKING:
    import pandas as pd


def build_search_section(name: str, table: pd.DataFrame, *, sample: int,
                         labels: np.ndarray | None, ref: ItemRef) -> dict[str, Any]:
    """The page data of one search table: at most ``sample`` queries (0: all) in table
    order, each ``{"q": query, "kind": image|item|text, "hits": [[item, rank, score,
    same_label]]}`` (``same_label``: whether the hit shares the query item's label, None
    when unknown)."""
    import pandas as pd

    t = table.reset_index(drop=True)
    queries = list(dict.fromkeys(t["query"].astype(str)))
    shown = queries[:sample] if sample > 0 else queries
    scores = pd.to_numeric(t["score"], errors="coerce").to_numpy(dtype=np.float64)
    ids = pd.to_numeric(t["id"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    ranks = pd.to_numeric(t["rank"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    paths = t["path"].to_numpy(dtype=object) if "path" in t.columns else [None] * len(t)
    kinds = t["query_kind"].astype(str).to_numpy()
    text = t["query"].astype(str).to_numpy()
    rows_of: dict[str, list[int]] = {}
    for r, q in enumerate(text):
        rows_of.setdefault(q, []).append(r)
    out = []
    for q in shown:
        rows = sorted(rows_of[q], key=lambda r: (ranks[r], r))
        own = None
        if kinds[rows[0]] == "item" and labels is not None and q.startswith("id:"):
            own = labels[int(q[3:])] if q[3:].isdigit() and int(q[3:]) < len(labels) else None
        hits = []
        for r in rows:
            if ids[r] < 0:
                continue
            same = None
            if own is not None and labels is not None:
                same = bool(labels[ids[r]] == own)
            s = scores[r]
            hits.append([ref(int(ids[r]), paths[r]), int(ranks[r]),
                         round(float(s), 5) if np.isfinite(s) else None, same])
        out.append({"q": q, "kind": str(kinds[rows[0]]), "hits": hits})
    summary = {
        "queries": len(queries), "queries_shown": len(shown), "rows": int(len(t)),
        "kinds": {str(k): int(v) for k, v in pd.Series(
            [kinds[rows_of[q][0]] for q in queries]).value_counts().items()},
        "score": score_stats(scores),
        "hist": histogram({"neighbour scores": scores[np.isfinite(scores)]}),
    }
    return {"kind": "search", "name": name, "summary": summary, "queries": out}
