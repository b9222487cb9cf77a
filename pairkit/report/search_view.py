"""The search view: each query of a ``pairkit search`` table with its neighbours, nearest
first (docs/search.md: store_id, query, query_kind, rank, id, score, path, ...)."""

from __future__ import annotations

import re
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
    when unknown: a query that is no item, or either label missing)."""
    import pandas as pd

    t = table.reset_index(drop=True)
    scores = pd.to_numeric(t["score"], errors="coerce").to_numpy(dtype=np.float64)
    ids = pd.to_numeric(t["id"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    ranks = pd.to_numeric(t["rank"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    paths = t["path"].to_numpy(dtype=object) if "path" in t.columns else [None] * len(t)
    # an empty cell is the empty text (a CSV reads ``search --text ""`` back as missing)
    kinds = t["query_kind"].astype(object).fillna("").astype(str).to_numpy()
    text = t["query"].astype(object).fillna("").astype(str).to_numpy()
    # a query is its text and, when the same text comes again (search 5 5), the block
    # after a rank its current block has seen: each search keeps its own hits
    rows_of: dict[tuple[str, int], list[int]] = {}
    block: dict[str, int] = {}
    seen: dict[tuple[str, int], set[int]] = {}
    for r, q in enumerate(text):
        key = (q, block.setdefault(q, 0))
        if int(ranks[r]) in seen.setdefault(key, set()):
            block[q] += 1
            key = (q, block[q])
        seen.setdefault(key, set()).add(int(ranks[r]))
        rows_of.setdefault(key, []).append(r)
    queries = list(rows_of)
    shown = queries[:sample] if sample > 0 else queries
    out = []
    for key in shown:
        q = key[0]
        rows = sorted(rows_of[key], key=lambda r: (ranks[r], r))
        own = None
        item = re.fullmatch(r"id:([0-9]+)", q, flags=re.ASCII)  # not "id:²" (isdigit)
        if kinds[rows[0]] == "item" and labels is not None and item:
            own = labels[int(item[1])] if int(item[1]) < len(labels) else None
        hits = []
        for r in rows:
            if ids[r] < 0:
                continue
            same = None
            if own is not None and labels is not None and labels[ids[r]] is not None:
                same = bool(labels[ids[r]] == own)  # a hit without a label: unknown
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
