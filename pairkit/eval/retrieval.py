"""Retrieval metrics from neighbour lists: precision@1, R-precision, MAP@R, recall@k.

Definitions follow Musgrave, Belongie & Lim 2020, "A Metric Learning Reality
Check" (R-precision and MAP@R) and pytorch-metric-learning's AccuracyCalculator:
for a query with label y, R is the number of references with label y that the
query may see (itself and excluded rows do not count).

- precision@1: the first neighbour has label y.
- R-precision: (relevant among the first R neighbours) / R.
- MAP@R: (1/R) * sum_{i<=R} P(i) * rel(i), P(i) = precision at rank i.
- recall@k: at least one of the first k neighbours has label y (the "Recall@K" of
  deep metric learning papers, e.g. Song et al. 2016).

Only the first ``max_r`` neighbours are looked at. For a query with R > max_r
the ranks after max_r count as misses while the denominator stays R, so its
R-precision and MAP@R are lower bounds of the true values (exact whenever
R <= max_r; AccuracyCalculator's MAP@R with an integer ``k`` is the same lower
bound). Queries with R = 0
(their class has no reference) are left out of every retrieval metric, as in
AccuracyCalculator.
"""

from __future__ import annotations

import numpy as np

from pairkit.eval.neighbours import Exclusion


def relevant_counts(
    query_labels: np.ndarray, ref_labels: np.ndarray, exclusion: Exclusion | None = None
) -> np.ndarray:
    """R for each query: references with the query's label minus excluded ones. int64 (nq,).

    Labels are int codes, -1 = unlabeled (R = 0 for such queries).
    """
    exclusion = exclusion or Exclusion()
    ql = np.asarray(query_labels, dtype=np.int64)
    rl = np.asarray(ref_labels, dtype=np.int64)
    labeled = rl[rl >= 0]
    counts = np.bincount(labeled, minlength=int(max(ql.max(initial=-1), rl.max(initial=-1))) + 1)
    r = np.where(ql >= 0, counts[np.maximum(ql, 0)], 0).astype(np.int64)
    qg = exclusion.query_groups
    rg = exclusion.ref_groups
    if qg is not None and rg is not None:
        n_lab = len(counts) + 1
        ok = (rg >= 0) & (rl >= 0)
        ref_keys = rg[ok] * n_lab + rl[ok]
        keys, key_counts = np.unique(ref_keys, return_counts=True)
        q_keys = np.where((qg >= 0) & (ql >= 0), qg * n_lab + ql, -1)
        pos = np.clip(np.searchsorted(keys, q_keys), 0, max(len(keys) - 1, 0))
        found = (q_keys >= 0) & (len(keys) > 0)
        if len(keys):
            found &= keys[pos] == q_keys
            r -= np.where(found, key_counts[pos], 0)
    if exclusion.self_rows is not None:
        s = exclusion.self_rows
        has_self = (s >= 0) & (ql >= 0)
        self_label = np.where(has_self, rl[np.maximum(s, 0)], -2)
        self_counted = has_self & (self_label == ql)
        if qg is not None and rg is not None:
            # already removed above when the query's own row shares its group
            self_counted &= rg[np.maximum(s, 0)] != qg
        r -= self_counted.astype(np.int64)
    return np.maximum(r, 0)


def retrieval_scores(
    neighbour_labels: np.ndarray,
    query_labels: np.ndarray,
    r_counts: np.ndarray,
    recall_ks: tuple[int, ...] = (1, 5, 10),
    max_r: int = 1000,
) -> dict[str, np.ndarray]:
    """Per-query retrieval scores for one block of queries.

    ``neighbour_labels`` int64 (b, K): labels of the neighbours best first (-1 none);
    ``query_labels`` (b,), ``r_counts`` (b,) from :func:`relevant_counts`. R is capped
    at ``min(max_r, K)`` for looking, not for dividing (see the module docstring).

    Returns a dict of (b,) arrays: ``valid`` (bool: R > 0), ``precision_at_1``,
    ``r_precision``, ``map_at_r`` (float64), ``capped`` (bool: R > the ranks looked at,
    so the two are lower bounds) and
    ``recall_at_{k}`` (bool) for each k. Average them over ``valid`` rows.
    """
    labels = np.asarray(neighbour_labels, dtype=np.int64)
    ql = np.asarray(query_labels, dtype=np.int64)
    b, kk = labels.shape
    r = np.asarray(r_counts, dtype=np.int64)
    valid = (r > 0) & (ql >= 0)
    r_eff = np.minimum(r, min(max_r, kk))
    rel = (labels == ql[:, None]) & valid[:, None]
    in_r = np.arange(kk)[None, :] < r_eff[:, None]
    rel_r = rel & in_r
    del in_r
    denom = np.maximum(r, 1).astype(np.float64)
    # (b, K) temporaries: the counts in int32 (K < 2**31), P(i) x rel(i) in place
    prec_at_i = np.cumsum(rel_r, axis=1, dtype=np.int32) / np.arange(1, kk + 1)[None, :]
    prec_at_i *= rel_r
    out: dict[str, np.ndarray] = {
        "valid": valid,
        "capped": valid & (r > r_eff),
        "precision_at_1": rel[:, 0].astype(np.float64) if kk else np.zeros(b),
        "r_precision": rel_r.sum(axis=1) / denom,
        "map_at_r": prec_at_i.sum(axis=1) / denom,
    }
    for k in recall_ks:
        out[f"recall_at_{k}"] = rel[:, :k].any(axis=1)
    return out
