"""Pair tables: mined anchors, positives and negatives as a DataFrame.

Formats (agreed with ``train``; see docs/formats.md):

- ``triplet``: store_id, anchor_id, positive_id, negative_id, anchor_path,
  positive_path, negative_path, pos_score, neg_score, neg_rank; one row per
  negative.
- ``n-tuple``: store_id, anchor_id, positive_id, anchor_path, positive_path,
  pos_score, negative_id_1..K, negative_path_1..K, neg_score_1..K; one row per
  anchor (missing negatives: id -1, path and score null).
- ``labeled-pair``: store_id, anchor_id, other_id, anchor_path, other_path,
  label (1 positive, 0 negative), score.

With flags kept, columns ``false_negative`` (bool) and ``fn_reason`` (str or
null; several reasons joined with ``|``). In ``attract`` mode each flagged
candidate is an extra row with ``false_negative=True`` (labeled-pair: label 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("triplet", "n-tuple", "labeled-pair")
TRIPLET_COLUMNS = ("store_id", "anchor_id", "positive_id", "negative_id", "anchor_path",
                   "positive_path", "negative_path", "pos_score", "neg_score", "neg_rank")
LABELED_PAIR_COLUMNS = ("store_id", "anchor_id", "other_id", "anchor_path", "other_path",
                        "label", "score")
FLAG_COLUMNS = ("false_negative", "fn_reason")


@dataclass
class MinedPairs:
    """What mining chose, as arrays (n anchors, K negatives per anchor at most).

    ``neg_ids`` (n, K) int64 (-1: none), ``neg_scores`` (n, K) float32 (NaN: none),
    ``neg_ranks`` (n, K) int64 rank among the anchor's valid candidates (-1: none
    or an easy negative); ``neg_flags``/``neg_reasons`` (n, K) when flags are kept.
    ``fn_rows``/``fn_ids``/``fn_scores``/``fn_ranks``/``fn_reasons`` list the
    flagged candidates attracted as extra positives (index into anchors, item id, ...).
    """

    anchors: np.ndarray
    positives: np.ndarray
    pos_scores: np.ndarray
    neg_ids: np.ndarray
    neg_scores: np.ndarray
    neg_ranks: np.ndarray
    neg_flags: np.ndarray | None = None
    neg_reasons: np.ndarray | None = None
    fn_rows: np.ndarray | None = None
    fn_ids: np.ndarray | None = None
    fn_scores: np.ndarray | None = None
    fn_ranks: np.ndarray | None = None
    fn_reasons: np.ndarray | None = None

    @property
    def negatives_per_anchor(self) -> np.ndarray:
        """(n,) int64: negatives found for each anchor."""
        return (self.neg_ids >= 0).sum(axis=1).astype(np.int64)


def _paths(paths: np.ndarray, ids: np.ndarray) -> Any:
    out = np.empty(ids.shape, dtype=object)
    ok = ids >= 0
    out[ok] = paths[ids[ok]]
    out[~ok] = None
    return _nullable(out)


class _Column:
    """One pandas array of ``values`` (the store's paths, the store id), taken by row:
    pandas infers the string type once for the N distinct values instead of once per
    table row (5 M rows at 1 M anchors), and a take of an Arrow-backed array copies no
    Python objects. The column is the one ``pd.DataFrame`` would infer from the values."""

    def __init__(self, values: Any) -> None:
        import pandas as pd

        self.array = pd.Series(np.asarray(values, dtype=object)).array

    def take(self, ids: np.ndarray) -> Any:
        import pandas as pd

        return pd.Series(self.array.take(np.asarray(ids, dtype=np.intp)))

    def repeat(self, m: int) -> Any:
        """The first value ``m`` times (the store id of every row)."""
        import pandas as pd

        if isinstance(self.array, pd.arrays.ArrowStringArray):
            import pyarrow as pa

            one = pa.array(self.array)
            return pd.Series(pd.arrays.ArrowStringArray(pa.repeat(one[0], m),
                                                        dtype=self.array.dtype))
        return self.take(np.zeros(m, np.intp))


def _filled(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
    """``(r, c, cells)``: the row and column of every filled cell (``ids >= 0``) in row
    order, and ``cells(x)`` = ``x[r, c]`` (a ravel when every cell is filled)."""
    ok = ids >= 0
    if ok.all():
        r = np.repeat(np.arange(ids.shape[0]), ids.shape[1])
        c = np.tile(np.arange(ids.shape[1]), ids.shape[0]) if ids.shape[0] else r
        return r, c, lambda x: np.asarray(x).ravel()
    r, c = np.nonzero(ok)
    return r, c, lambda x: np.asarray(x)[r, c]


def _nullable(values: Any) -> Any:
    """An object column that keeps None for missing values (pandas would infer str + NaN)."""
    import pandas as pd

    return pd.Series(np.asarray(values, dtype=object), dtype=object)


@dataclass(frozen=True)
class _TableParts:
    """What every format's columns are built from: the store's paths (and as a column), the
    store id as a column, anchors ``n`` by negative slots ``k``, whether the flag columns
    are written, the flags and reasons of the negatives (n, k), and the attracted rows
    (anchor row, candidate id, score, rank, reason; empty arrays when there are none)."""

    paths: np.ndarray
    path_col: _Column
    store_col: _Column
    n: int
    k: int
    flags: bool
    attract: bool
    neg_flags: np.ndarray
    neg_reasons: np.ndarray
    fn_rows: np.ndarray
    fn_ids: np.ndarray
    fn_scores: np.ndarray
    fn_ranks: np.ndarray
    fn_reasons: np.ndarray


def build_pair_table(
    mined: MinedPairs, fmt: str, store_id: str, paths: np.ndarray, flag_columns: bool = False
) -> pd.DataFrame:
    """The pair table of ``mined`` in ``fmt`` (one of :data:`FORMATS`).

    ``paths`` (N,) object: the store's item paths. ``flag_columns`` adds
    ``false_negative`` and ``fn_reason`` (always added when attracted rows exist).
    Rows are ordered by anchor, then by negative rank.
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {fmt}")
    parts = _table_parts(mined, store_id, paths, flag_columns)
    if fmt == "triplet":
        return _triplet_table(mined, parts)
    if fmt == "labeled-pair":
        return _labeled_pair_table(mined, parts)
    return _n_tuple_table(mined, parts, store_id)


def _table_parts(mined: MinedPairs, store_id: str, paths: np.ndarray, flag_columns: bool
                 ) -> _TableParts:
    paths = np.asarray(paths, dtype=object)
    n, k = mined.neg_ids.shape
    has_attract = mined.fn_ids is not None and len(mined.fn_ids) > 0
    neg_flags = mined.neg_flags if mined.neg_flags is not None else np.zeros((n, k), bool)
    neg_reasons = (mined.neg_reasons if mined.neg_reasons is not None
                   else np.full((n, k), None, dtype=object))
    if has_attract:
        fn = (mined.fn_rows, mined.fn_ids, mined.fn_scores, mined.fn_ranks, mined.fn_reasons)
    else:
        e = np.zeros(0, dtype=np.int64)
        fn = (e, e, np.zeros(0, np.float32), e, np.zeros(0, dtype=object))
    fn_rows, fn_ids, fn_scores, fn_ranks, fn_reasons = fn  # type: ignore[misc]
    return _TableParts(paths, _Column(paths), _Column([store_id]), n, k,
                       flag_columns or has_attract, has_attract, neg_flags, neg_reasons,
                       np.asarray(fn_rows, dtype=np.int64), fn_ids, fn_scores, fn_ranks,
                       fn_reasons)


def _triplet_table(mined: MinedPairs, p: _TableParts) -> pd.DataFrame:
    """One row per (anchor, negative), then the attracted rows, in anchor order."""
    import pandas as pd

    path_col, store_col, n, k = p.path_col, p.store_col, p.n, p.k
    flags, neg_flags, neg_reasons = p.flags, p.neg_flags, p.neg_reasons
    fn_rows, fn_ids, fn_scores, fn_ranks, fn_reasons = (p.fn_rows, p.fn_ids, p.fn_scores,
                                                        p.fn_ranks, p.fn_reasons)
    r, c, cells = _filled(mined.neg_ids)
    rows = np.concatenate([r, fn_rows])
    per_row = len(fn_rows) == 0 and len(r) == n * k  # every anchor has K negatives

    def by_row(x: np.ndarray) -> np.ndarray:  # x[rows]: a repeat when every row has K
        return np.repeat(x, k) if per_row else x[rows]

    def joined(x: np.ndarray, extra: np.ndarray, dtype: Any) -> np.ndarray:
        return np.concatenate([cells(x), extra]).astype(dtype, copy=False)

    neg = joined(mined.neg_ids, fn_ids, np.int64)
    anchor_ids, positive_ids = by_row(mined.anchors), by_row(mined.positives)
    df = pd.DataFrame({
        "store_id": store_col.repeat(len(rows)),
        "anchor_id": anchor_ids,
        "positive_id": positive_ids,
        "negative_id": neg,
        "anchor_path": path_col.take(anchor_ids),
        "positive_path": path_col.take(positive_ids),
        "negative_path": path_col.take(neg),
        "pos_score": by_row(mined.pos_scores).astype(np.float32, copy=False),
        "neg_score": joined(mined.neg_scores, fn_scores, np.float32),
        "neg_rank": joined(mined.neg_ranks, fn_ranks, np.int64),
    })
    if flags:
        df["false_negative"] = np.concatenate(
            [cells(neg_flags), np.ones(len(fn_rows), bool)])
        df["fn_reason"] = _nullable(np.concatenate([cells(neg_reasons), fn_reasons]))
    if not len(fn_rows):  # rows of np.nonzero: in anchor order already
        return df
    order = np.argsort(rows, kind="stable")
    return df.iloc[order].reset_index(drop=True)


def _labeled_pair_table(mined: MinedPairs, p: _TableParts) -> pd.DataFrame:
    """Per anchor: the positive (label 1), the negatives by rank (0), the attracted (1)."""
    import pandas as pd

    path_col, store_col, n = p.path_col, p.store_col, p.n
    flags, neg_flags, neg_reasons = p.flags, p.neg_flags, p.neg_reasons
    fn_rows, fn_ids, fn_scores, fn_reasons = p.fn_rows, p.fn_ids, p.fn_scores, p.fn_reasons
    r, c = np.nonzero(mined.neg_ids >= 0)
    pos_rows = np.arange(n)
    rows = np.concatenate([pos_rows, r, fn_rows])
    other = np.concatenate([mined.positives, mined.neg_ids[r, c], fn_ids]).astype(np.int64)
    label = np.concatenate([np.ones(n, np.int64), np.zeros(len(r), np.int64),
                            np.ones(len(fn_rows), np.int64)])
    score = np.concatenate([mined.pos_scores, mined.neg_scores[r, c], fn_scores])
    # within an anchor: the positive first, then negatives by rank, then attracted
    kind_order = np.concatenate([np.zeros(n), np.ones(len(r)), np.full(len(fn_rows), 2)])
    df = pd.DataFrame({
        "store_id": store_col.repeat(len(rows)),
        "anchor_id": mined.anchors[rows],
        "other_id": other,
        "anchor_path": path_col.take(mined.anchors[rows]),
        "other_path": path_col.take(other),
        "label": label,
        "score": score.astype(np.float32),
    })
    if flags:
        df["false_negative"] = np.concatenate(
            [np.zeros(n, bool), neg_flags[r, c], np.ones(len(fn_rows), bool)])
        df["fn_reason"] = _nullable(np.concatenate(
            [np.full(n, None, dtype=object), neg_reasons[r, c], fn_reasons]))
    order = np.lexsort((kind_order, rows))
    return df.iloc[order].reset_index(drop=True)


def _n_tuple_table(mined: MinedPairs, p: _TableParts, store_id: str) -> pd.DataFrame:
    """One row per anchor with its K negatives, then one row per attracted candidate."""
    import pandas as pd

    paths, path_col, store_col, n, k = p.paths, p.path_col, p.store_col, p.n, p.k
    flags, neg_flags, neg_reasons, has_attract = p.flags, p.neg_flags, p.neg_reasons, p.attract
    fn_rows, fn_ids, fn_scores, fn_reasons = p.fn_rows, p.fn_ids, p.fn_scores, p.fn_reasons
    data: dict[str, object] = {
        "store_id": store_col.repeat(n),
        "anchor_id": mined.anchors,
        "positive_id": mined.positives,
        "anchor_path": path_col.take(mined.anchors),
        "positive_path": path_col.take(mined.positives),
        "pos_score": mined.pos_scores.astype(np.float32),
    }
    neg_scores = np.where(mined.neg_ids >= 0, mined.neg_scores, np.nan)
    for j in range(k):
        data[f"negative_id_{j + 1}"] = mined.neg_ids[:, j]
    for j in range(k):
        data[f"negative_path_{j + 1}"] = _paths(paths, mined.neg_ids[:, j])
    for j in range(k):
        data[f"neg_score_{j + 1}"] = neg_scores[:, j].astype(np.float32)
    df = pd.DataFrame(data)
    if flags:
        df["false_negative"] = neg_flags.any(axis=1)
        df["fn_reason"] = _nullable([
            "|".join(sorted({p for x in row if x for p in str(x).split("|")})) or None
            for row in neg_reasons
        ])
    if has_attract:
        extra: dict[str, object] = {
            "store_id": store_id,
            "anchor_id": mined.anchors[fn_rows],
            "positive_id": mined.positives[fn_rows],
            "anchor_path": paths[mined.anchors[fn_rows]],
            "positive_path": paths[mined.positives[fn_rows]],
            "pos_score": mined.pos_scores[fn_rows].astype(np.float32),
        }
        m = len(fn_rows)
        for j in range(k):
            extra[f"negative_id_{j + 1}"] = fn_ids if j == 0 else np.full(m, -1, np.int64)
        for j in range(k):
            extra[f"negative_path_{j + 1}"] = _nullable(paths[fn_ids] if j == 0
                                                        else np.full(m, None, dtype=object))
        for j in range(k):
            extra[f"neg_score_{j + 1}"] = (np.asarray(fn_scores, np.float32) if j == 0
                                           else np.full(m, np.nan, np.float32))
        extra["false_negative"] = np.ones(m, bool)
        extra["fn_reason"] = _nullable(fn_reasons)
        all_rows = np.concatenate([np.arange(n), fn_rows])
        df = pd.concat([df, pd.DataFrame(extra)], ignore_index=True)
        order = np.argsort(all_rows, kind="stable")
        df = df.iloc[order].reset_index(drop=True)
    return df


POSITIVE_COLUMNS = ("positive_kind", "positive_reason", "positive_confidence")


def add_mined_positives(table: pd.DataFrame, fmt: str, anchors: np.ndarray,
                        rows: np.ndarray, ids: np.ndarray, scores: np.ndarray,
                        confidence: np.ndarray, reasons: np.ndarray, store_id: str,
                        paths: np.ndarray) -> pd.DataFrame:
    """``table`` (from :func:`build_pair_table`) with one extra row per mined positive.

    ``rows`` index into ``anchors``; ``ids``, ``scores``, ``confidence``, ``reasons`` are
    the mined positives (pairkit.mine.positives.MinedPositives). Every row gets
    ``positive_kind`` (``view``: the other view of the anchor's source, ``mined``),
    ``positive_reason`` and ``positive_confidence`` (null for view rows). A mined row has
    no negative (triplet: ``negative_id`` -1 and null path/score; n-tuple: every slot
    empty; labeled-pair: ``label`` 1 with ``other_id`` the positive). Rows stay grouped by
    anchor: its view rows first, then its mined positives.
    """
    import pandas as pd

    paths = np.asarray(paths, dtype=object)
    m = len(ids)
    a = np.asarray(anchors, dtype=np.int64)[rows]
    if fmt == "labeled-pair":
        extra: dict[str, Any] = {"store_id": store_id, "anchor_id": a, "other_id": ids,
                                 "anchor_path": paths[a], "other_path": paths[ids],
                                 "label": np.ones(m, np.int64),
                                 "score": np.asarray(scores, np.float32)}
    else:
        extra = {"store_id": store_id, "anchor_id": a, "positive_id": ids,
                 "anchor_path": paths[a], "positive_path": paths[ids],
                 "pos_score": np.asarray(scores, np.float32)}
        if fmt == "triplet":
            extra.update(negative_id=np.full(m, -1, np.int64),
                         negative_path=_nullable(np.full(m, None, dtype=object)),
                         neg_score=np.full(m, np.nan, np.float32),
                         neg_rank=np.full(m, -1, np.int64))
        else:
            k = sum(1 for c in table.columns if str(c).startswith("negative_id_"))
            for j in range(1, k + 1):
                extra[f"negative_id_{j}"] = np.full(m, -1, np.int64)
                extra[f"negative_path_{j}"] = _nullable(np.full(m, None, dtype=object))
                extra[f"neg_score_{j}"] = np.full(m, np.nan, np.float32)
    if "false_negative" in table.columns:
        extra["false_negative"] = np.zeros(m, bool)
        extra["fn_reason"] = _nullable(np.full(m, None, dtype=object))
    base = table.copy()
    if fmt == "labeled-pair":
        is_pos = base["label"].to_numpy() == 1
        base["positive_kind"] = _nullable(np.where(is_pos, "view", None))
    else:
        base["positive_kind"] = "view"
    base["positive_reason"] = _nullable(np.full(len(base), None, dtype=object))
    base["positive_confidence"] = np.full(len(base), np.nan, np.float32)
    more = pd.DataFrame(extra)
    more["positive_kind"] = "mined"
    more["positive_reason"] = _nullable(reasons)
    more["positive_confidence"] = np.asarray(confidence, np.float32)
    out = pd.concat([base, more[list(base.columns)]], ignore_index=True)
    anchors = np.asarray(anchors, dtype=np.int64)
    sorter = np.argsort(anchors, kind="stable")
    base_ids = base["anchor_id"].to_numpy(dtype=np.int64)
    base_rows = sorter[np.searchsorted(anchors, base_ids, sorter=sorter)]
    order = np.argsort(np.concatenate([base_rows, np.asarray(rows, np.int64)]), kind="stable")
    return out.iloc[order].reset_index(drop=True)


def integer_ids(raw: pd.Series, column: str, allow_missing: bool) -> np.ndarray:
    """A pair-table id column as int64 (n,): with ``allow_missing`` an empty cell is -1 (no
    negative there). A value that is not a whole number (``'oops'``, ``1.5``, or an empty
    cell where an id is required) is a PairkitError naming the column and row, the same in
    train and report."""
    import pandas as pd

    values = pd.to_numeric(raw, errors="coerce")
    if allow_missing:
        # only an empty cell means "none"; a value that is not a number is an error (it
        # was read as missing once, and its negatives silently dropped)
        empty = raw.isna() | (raw.astype(str).str.strip() == "") if raw.dtype == object \
            else raw.isna()
        values = values.where(~empty, -1)
    bad = values.isna() | (values != values.round())
    if bool(bad.any()):
        row = int(np.flatnonzero(bad.to_numpy())[0])
        value = raw.iloc[row]
        value = value.item() if isinstance(value, np.generic) else value
        raise PairkitError(f"pair table: column {column} must hold integer ids, got "
                           f"{value!a} (row {row})")
    return values.to_numpy(dtype=np.int64)
