"""Small pair tables built from a store, in the agreed triplet / n-tuple formats."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pairkit.index.search import knn_search


def instance_triplets(store, k: int = 3, keep_flagged: bool = False) -> pd.DataFrame:
    """Triplet table: each item, another view of its source, its k nearest other-source items.

    With ``keep_flagged`` negatives of the anchor's label get ``false_negative=True``.
    """
    vectors = store.vectors()
    sources = store.source_codes()
    labels = store.labels()
    paths = store.items["path"].to_numpy()
    scores, ids = knn_search(vectors, vectors, k + 8)
    rows = []
    for a in range(store.count):
        mates = np.flatnonzero((sources == sources[a]) & (np.arange(store.count) != a))
        if len(mates) == 0:
            continue
        p = int(mates[0])
        negs = [(int(i), float(s)) for i, s in zip(ids[a], scores[a], strict=True)
                if i >= 0 and sources[i] != sources[a]][:k]
        for rank, (n, s) in enumerate(negs):
            row = {"store_id": store.content_id, "anchor_id": a, "positive_id": p,
                   "negative_id": n, "anchor_path": paths[a], "positive_path": paths[p],
                   "negative_path": paths[n], "pos_score": float(vectors[a] @ vectors[p]),
                   "neg_score": s, "neg_rank": rank}
            if keep_flagged:
                flagged = labels is not None and labels[n] == labels[a]
                row["false_negative"] = bool(flagged)
                row["fn_reason"] = "label" if flagged else None
            rows.append(row)
    return pd.DataFrame(rows)


def to_ntuple(triplets: pd.DataFrame) -> pd.DataFrame:
    """The same pairs as an n-tuple table (missing negatives: id -1, path/score null)."""
    out = []
    for (a, p), g in triplets.groupby(["anchor_id", "positive_id"], sort=True):
        row = {"store_id": g["store_id"].iloc[0], "anchor_id": a, "positive_id": p,
               "anchor_path": g["anchor_path"].iloc[0], "positive_path": g["positive_path"].iloc[0],
               "pos_score": g["pos_score"].iloc[0]}
        for j, (_, r) in enumerate(g.iterrows(), start=1):
            row[f"negative_id_{j}"] = r["negative_id"]
            row[f"negative_path_{j}"] = r["negative_path"]
            row[f"neg_score_{j}"] = r["neg_score"]
        out.append(row)
    df = pd.DataFrame(out)
    for c in df.columns:
        if c.startswith("negative_id_"):
            df[c] = df[c].fillna(-1).astype(np.int64)
    return df
