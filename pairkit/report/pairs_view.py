"""The pair-table view: per anchor its positives and negatives, with the flags.

Any of the three formats (triplet, n-tuple, labeled-pair; docs/formats.md), with
or without ``false_negative``/``fn_reason``, is brought to one long form (one row per
positive, one row per negative): without paths for the summary of the whole table and
the draw of ``sample`` random anchors, then with every column for those anchors' rows
only, for the page (a parquet table is read so: :mod:`pairkit.report.pair_source`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.table_items import negative_slots
from pairkit.report.items import ItemRef
from pairkit.report.summary import histogram, score_stats

if TYPE_CHECKING:
    import pandas as pd

MAX_NEGATIVES_SHOWN = 64  # per anchor; the rest is counted, not shown
MAX_POSITIVES_SHOWN = 16


@dataclass
class LongPairs:
    """``positives``: anchor_id, item_id, path, score, anchor_path;
    ``negatives``: anchor_id, item_id, path, score, rank, flag, reason, anchor_path."""

    positives: pd.DataFrame
    negatives: pd.DataFrame
    has_flags: bool
    row_flags: bool  # n-tuple: a flag describes the row, not one negative


def _col(table: pd.DataFrame, name: str, default: Any) -> Any:
    import pandas as pd

    if name in table.columns:
        return table[name].reset_index(drop=True)
    return pd.Series([default] * len(table), dtype=object if default is None else None)


def _num(series: Any) -> np.ndarray:
    import pandas as pd

    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)


def _ids(series: Any, column: str, required: bool = False) -> np.ndarray:
    """Ids as train reads them (:func:`pairkit.core.pairs.integer_ids`): -1 for an empty
    cell unless ``required``; a value that is not a whole number is refused."""
    from pairkit.core.pairs import integer_ids

    return integer_ids(series, column, allow_missing=not required)


def _flags(table: pd.DataFrame) -> np.ndarray:
    if "false_negative" not in table.columns:
        return np.zeros(len(table), dtype=bool)
    column = table["false_negative"]
    if column.dtype == bool:
        return column.to_numpy(dtype=bool)
    values = column.to_numpy(dtype=object)
    return np.array([str(v).strip().lower() in ("true", "1", "1.0", "yes") for v in values],
                    dtype=bool)


def _reasons(table: pd.DataFrame) -> np.ndarray:
    """fn_reason as an object array of str or None (empty and missing cells: None)."""
    if "fn_reason" not in table.columns:
        return np.full(len(table), None, dtype=object)
    column = table["fn_reason"]
    missing = column.isna().to_numpy()
    text = column.astype(object).where(~missing, "").astype(str).to_numpy(dtype=object)
    text[missing | (text == "")] = None
    return text


# the columns to_long reads besides the paths (and all the summary needs)
SUMMARY_COLUMNS = ("anchor_id", "positive_id", "negative_id", "other_id", "label",
                   "pos_score", "neg_score", "score", "neg_rank", "false_negative",
                   "fn_reason")


def summary_columns(columns: list[str]) -> list[str]:
    """The columns of a pair table (of ``columns``) that :func:`to_long` reads with
    ``paths=False``, in table order."""
    slots = {f"{c}_{j}" for j in negative_slots(columns) for c in ("negative_id", "neg_score")}
    return [c for c in columns if c in SUMMARY_COLUMNS or c in slots]


def to_long(table: pd.DataFrame, fmt: str, paths: bool = True) -> LongPairs:
    """One row per positive and one per negative of a pair table in ``fmt``; without
    ``paths`` no ``path``/``anchor_path`` columns (the summary's form: a table read without
    its path columns)."""
    import pandas as pd

    t = table.reset_index(drop=True)
    anchor = _ids(t["anchor_id"], "anchor_id", required=True)
    anchor_path = _col(t, "anchor_path", None).to_numpy(dtype=object) if paths else None
    flags, reasons = _flags(t), _reasons(t)
    has_flags = "false_negative" in t.columns

    def frame(columns: dict[str, Any], path: str | None, rows: Any = slice(None)
              ) -> pd.DataFrame:
        """``columns`` with, when ``paths``, the path column ``path`` and ``anchor_path``
        (at ``rows``) in their places."""
        if not paths:
            return pd.DataFrame({k: v for k, v in columns.items() if k != "path"})
        out = dict(columns)
        out["path"] = _col(t, path, None).to_numpy(dtype=object)[rows] if path else None
        assert anchor_path is not None
        out["anchor_path"] = anchor_path[rows]
        return pd.DataFrame(out)

    if fmt == "labeled-pair":
        label = _ids(t["label"], "label")
        other = _ids(t["other_id"], "other_id")
        score = _num(_col(t, "score", np.nan))
        is_pos = (label == 1) & ~flags
        pos = frame({"anchor_id": anchor[is_pos], "item_id": other[is_pos], "path": None,
                     "score": score[is_pos]}, "other_path", is_pos)
        neg_rows = np.flatnonzero(~is_pos & (other >= 0))
        neg = frame({"anchor_id": anchor[neg_rows], "item_id": other[neg_rows], "path": None,
                     "score": score[neg_rows], "flag": flags[neg_rows],
                     "reason": reasons[neg_rows]}, "other_path", neg_rows)
        # rank: order among the anchor's negatives; attracted candidates (label 1) -1
        neg["rank"] = neg.groupby("anchor_id").cumcount().to_numpy()
        neg.loc[label[neg_rows] == 1, "rank"] = -1
        return LongPairs(pos, neg, has_flags, False)
    pos = frame({"anchor_id": anchor, "item_id": _ids(t["positive_id"], "positive_id"),
                 "path": None, "score": _num(_col(t, "pos_score", np.nan))}, "positive_path")
    pos = pos[pos["item_id"] >= 0].drop_duplicates(["anchor_id", "item_id"])
    if fmt == "triplet":
        rank = _ids(_col(t, "neg_rank", -1), "neg_rank")
        neg = frame({"anchor_id": anchor, "item_id": _ids(t["negative_id"], "negative_id"),
                     "path": None, "score": _num(_col(t, "neg_score", np.nan)), "rank": rank,
                     "flag": flags, "reason": reasons}, "negative_path")
        return LongPairs(pos, _named(neg), has_flags, False)
    parts = []
    for j in negative_slots(list(t.columns)):
        parts.append(frame({
            "anchor_id": anchor, "item_id": _ids(t[f"negative_id_{j}"], f"negative_id_{j}"),
            "path": None, "score": _num(_col(t, f"neg_score_{j}", np.nan)),
            "rank": np.full(len(t), j - 1, dtype=np.int64),
            "flag": flags, "reason": reasons}, f"negative_path_{j}"))
    names = ["anchor_id", "item_id", "path", "score", "rank", "flag", "reason", "anchor_path"]
    neg = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=names if paths else [n for n in names if n not in ("path", "anchor_path")])
    return LongPairs(pos, _named(neg), has_flags, True)


def _named(neg: pd.DataFrame) -> pd.DataFrame:
    """The negatives that name an item (id >= 0); ``neg`` itself, not a copy, when all do."""
    named = neg["item_id"].to_numpy() >= 0
    return neg if named.all() else neg[named]


def reason_counts(reasons: np.ndarray) -> dict[str, int]:
    """How often each reason occurs; several reasons in one cell are joined by ``|``.

    Reasons are free text (rules may be added): anything between the bars counts.
    """
    import pandas as pd

    counts: Counter[str] = Counter()
    cells = pd.Series(reasons, dtype=object).dropna().value_counts()
    for cell, n in cells.items():  # each distinct cell once, not each row
        for part in str(cell).split("|"):
            part = part.strip()
            if part:
                counts[part] += int(n)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def summarize(long: LongPairs, fmt: str, n_rows: int, labels: np.ndarray | None
              ) -> dict[str, Any]:
    """Counts, false-negative flags, score statistics and histograms of the whole table."""
    neg, pos = long.negatives, long.positives
    flag = neg["flag"].to_numpy(dtype=bool)
    neg_scores = neg["score"].to_numpy(dtype=np.float64)
    anchors = np.union1d(pos["anchor_id"].to_numpy(), neg["anchor_id"].to_numpy())
    out: dict[str, Any] = {
        "format": fmt, "rows": int(n_rows), "anchors": int(len(anchors)),
        "positives": int(len(pos)), "negatives": int(len(neg)),
        "has_flags": long.has_flags, "row_flags": long.row_flags,
        "flagged": int(flag.sum()),
        "reasons": reason_counts(neg["reason"].to_numpy(dtype=object)[flag]),
        "scores": {"positive": score_stats(pos["score"].to_numpy(dtype=np.float64)),
                   "negative": score_stats(neg_scores[~flag]),
                   "flagged": score_stats(neg_scores[flag])},
        "hist": histogram({"positives": pos["score"].to_numpy(dtype=np.float64),
                           "negatives": neg_scores[~flag],
                           "flagged negatives": neg_scores[flag]}),
    }
    if labels is not None and len(neg):
        from pairkit.core.store import codes_of

        codes, _ = codes_of(labels)  # missing label: -1
        a = codes[neg["anchor_id"].to_numpy()]
        n = codes[neg["item_id"].to_numpy()]
        known = (a >= 0) & (n >= 0)
        same = known & (a == n)
        out["same_label"] = {
            "unflagged": _share(same[~flag], known[~flag]),
            "flagged": _share(same[flag], known[flag]),
        }
    return out


def _share(hits: np.ndarray, known: np.ndarray) -> dict[str, Any]:
    k = int(known.sum())
    return {"n": k, "same": int(hits.sum()), "share": float(hits.sum() / k) if k else None}


def sample_anchors(long: LongPairs, sample: int, seed: int) -> np.ndarray:
    """Sorted ids of ``sample`` anchors drawn with ``seed`` (all when sample is 0 or more
    than there are)."""
    anchors = np.union1d(long.positives["anchor_id"].to_numpy(),
                         long.negatives["anchor_id"].to_numpy()).astype(np.int64)
    if sample <= 0 or sample >= len(anchors):
        return anchors
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(anchors, size=sample, replace=False))


def anchor_blocks(long: LongPairs, chosen: np.ndarray, ref: ItemRef) -> list[dict[str, Any]]:
    """Per chosen anchor: ``a`` (item), ``p`` [[item, score]], ``n`` [[item, score, rank,
    flag, reason]] (hardest first, at most :data:`MAX_NEGATIVES_SHOWN`), ``more``."""
    pos = long.positives[long.positives["anchor_id"].isin(chosen)]
    neg = long.negatives[long.negatives["anchor_id"].isin(chosen)]
    p_anchor = pos["anchor_id"].to_numpy()
    p_order = np.argsort(p_anchor, kind="stable")
    p_anchor = p_anchor[p_order]
    p_item = pos["item_id"].to_numpy()[p_order]
    p_path = pos["path"].to_numpy(dtype=object)[p_order]
    p_score = pos["score"].to_numpy(dtype=np.float64)[p_order]
    p_apath = pos["anchor_path"].to_numpy(dtype=object)[p_order]
    n_anchor = neg["anchor_id"].to_numpy()
    rank = neg["rank"].to_numpy()
    score = neg["score"].to_numpy(dtype=np.float64)
    # per anchor: ranked negatives first (rank 0 = hardest), unranked (-1) last, then by
    # score, highest first (NaN last)
    n_order = np.lexsort((np.nan_to_num(-score, nan=np.inf), rank, rank < 0, n_anchor))
    n_anchor = n_anchor[n_order]
    cols = [neg["item_id"].to_numpy()[n_order], neg["path"].to_numpy(dtype=object)[n_order],
            score[n_order], rank[n_order], neg["flag"].to_numpy(dtype=bool)[n_order],
            neg["reason"].to_numpy(dtype=object)[n_order]]
    n_apath = neg["anchor_path"].to_numpy(dtype=object)[n_order]
    p_lo, p_hi = np.searchsorted(p_anchor, chosen, "left"), np.searchsorted(p_anchor, chosen,
                                                                           "right")
    n_lo, n_hi = np.searchsorted(n_anchor, chosen, "left"), np.searchsorted(n_anchor, chosen,
                                                                           "right")
    blocks = []
    for j, a in enumerate(chosen.tolist()):
        a_path = (p_apath[p_lo[j]] if p_hi[j] > p_lo[j]
                  else n_apath[n_lo[j]] if n_hi[j] > n_lo[j] else None)
        block: dict[str, Any] = {"a": ref(a, a_path), "p": [], "n": [], "more": 0}
        for i in range(p_lo[j], min(p_hi[j], p_lo[j] + MAX_POSITIVES_SHOWN)):
            block["p"].append([ref(int(p_item[i]), p_path[i]), _score(p_score[i])])
        stop = min(n_hi[j], n_lo[j] + MAX_NEGATIVES_SHOWN)
        for i in range(n_lo[j], stop):
            block["n"].append([ref(int(cols[0][i]), cols[1][i]), _score(cols[2][i]),
                               int(cols[3][i]), 1 if cols[4][i] else 0, cols[5][i]])
        block["more"] = int(n_hi[j] - stop)
        blocks.append(block)
    return blocks


def _score(value: Any) -> float | None:
    v = float(value)
    return round(v, 5) if np.isfinite(v) else None


def rows_of_anchors(table: pd.DataFrame, chosen: np.ndarray) -> np.ndarray:
    """The rows (positions, ascending) of ``table`` whose anchor is one of ``chosen``."""
    anchor = _ids(table["anchor_id"], "anchor_id", required=True)
    return np.flatnonzero(np.isin(anchor, chosen))


# rows (positions, ascending) -> every column of those rows, in that order
RowReader = Callable[[np.ndarray], "pd.DataFrame"]


def build_pairs_section(name: str, table: pd.DataFrame, fmt: str, *, sample: int, seed: int,
                        labels: np.ndarray | None, ref: ItemRef,
                        rows: RowReader | None = None) -> dict[str, Any]:
    """The page data of one pair table (see report.js, ``renderPairs``).

    The summary and the sample come from ``table`` without its paths; the anchors' blocks
    from every column of the sampled anchors' rows only: ``rows`` reads them (a table read
    narrow, :mod:`pairkit.report.pair_source`), by default from ``table`` itself."""
    long = to_long(table, fmt, paths=False)
    summary = summarize(long, fmt, len(table), labels)
    chosen = sample_anchors(long, sample, seed)
    del long
    summary["anchors_shown"] = int(len(chosen))
    summary["sample"] = sample
    summary["seed"] = seed
    picked = rows_of_anchors(table, chosen)
    part = (rows(picked) if rows is not None
            else table.iloc[picked].reset_index(drop=True))
    return {"kind": "pairs", "name": name, "summary": summary,
            "anchors": anchor_blocks(to_long(part, fmt), chosen, ref)}
