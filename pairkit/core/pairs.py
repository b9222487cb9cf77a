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



def cosines(scores: Any) -> np.ndarray:
    """Scores as the table writes them: float32 cosines, clipped to [-1, 1] as ``search``
    and ``dedup`` clip theirs (a float16 store's rows are normalised to about 1e-3, so a
    row's product with its copy can be 1.0001); NaN stays NaN."""
    return np.clip(np.asarray(scores, dtype=np.float32), -1.0, 1.0)

def _values(paths: np.ndarray | StringColumn, ids: np.ndarray) -> np.ndarray:
    """``paths[ids]`` (ids >= 0) as an object array, from an array or a column."""
    return paths.values(ids) if isinstance(paths, StringColumn) else paths[ids]


def _paths(paths: np.ndarray | StringColumn, ids: np.ndarray) -> Any:
    out = np.empty(ids.shape, dtype=object)
    ok = ids >= 0
    out[ok] = _values(paths, ids[ok])
    out[~ok] = None
    return _nullable(out)


REPEAT_CHUNK = 1 << 16  # rows of the one chunk a repeated value's column is made of


class StringColumn:
    """One pandas array of ``values`` (the store's paths, the store id), taken by row:
    the string type is found once for the N distinct values instead of once per table
    row (5 M rows at 1 M anchors), and a take of an Arrow-backed array copies no Python
    objects. The column is the one ``pd.DataFrame`` would infer from the values
    (:func:`inferred_array`)."""

    def __init__(self, values: Any) -> None:
        import pandas as pd

        self.array = inferred_array(values)
        self.arrow = (pa_array(self.array) if isinstance(self.array, pd.arrays.ArrowStringArray)
                      else None)

    @classmethod
    def of_arrow(cls, values: Any) -> StringColumn:
        """The column of a pyarrow string array without nulls (the store's paths read by
        :meth:`pairkit.core.store.Store.item_columns`): the array :func:`inferred_array`
        makes of the same values as Python strings, without making them."""
        import pandas as pd
        import pyarrow as pa

        dtype = pd.Series(np.array(["x"], dtype=object)).dtype  # pandas' str type
        if (not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type)
                or values.null_count or not isinstance(dtype, pd.StringDtype)
                or dtype.storage != "pyarrow"):
            return cls(values.to_numpy(zero_copy_only=False))
        column = cls.__new__(cls)
        column.array = pd.arrays.ArrowStringArray(values, dtype=dtype)
        column.arrow = pa_array(column.array)
        return column

    def values(self, ids: np.ndarray) -> np.ndarray:
        """The values of rows ``ids`` (>= 0) as an object array of Python strings."""
        return np.asarray(self.take(ids), dtype=object)

    def take(self, ids: np.ndarray) -> Any:
        """``pd.Series(array.take(ids))``: for Arrow strings, the take in memory from the
        system allocator (a 5 M-row take into fresh memory from pyarrow's default one,
        mimalloc, measured 3-5x slower on Linux; the same values)."""
        import pandas as pd

        ids = np.asarray(ids, dtype=np.intp)
        if self.arrow is None or (len(ids) and int(ids.min()) < 0):
            return pd.Series(self.array.take(ids), copy=False)
        import pyarrow as pa
        import pyarrow.compute as pc

        taken = pc.take(self.arrow, pa.array(ids), memory_pool=pa.system_memory_pool())
        return pd.Series(pd.arrays.ArrowStringArray(taken, dtype=self.array.dtype),
                         copy=False)

    def repeat(self, m: int) -> Any:
        """The first value ``m`` times (the store id of every row): for an Arrow string
        array, one chunk of REPEAT_CHUNK copies referenced as often as needed (no
        memory per row; the same values, and the same parquet bytes, as one array)."""
        import pandas as pd

        if isinstance(self.array, pd.arrays.ArrowStringArray):
            import pyarrow as pa

            one = self.arrow
            block = pa.repeat(one[0], min(m, REPEAT_CHUNK))
            chunks = [block] * (m // REPEAT_CHUNK) if m >= REPEAT_CHUNK else []
            if m % REPEAT_CHUNK or not chunks:
                chunks.append(block.slice(0, m % REPEAT_CHUNK if chunks else m))
            column = pa.chunked_array(chunks, type=block.type)
            return pd.Series(pd.arrays.ArrowStringArray(column, dtype=self.array.dtype),
                             copy=False)
        return self.take(np.zeros(m, np.intp))


def pa_array(values: Any) -> Any:
    """The pyarrow (chunked) array behind a pandas Arrow-backed array."""
    import pyarrow as pa

    return pa.array(values)


def inferred_array(values: Any) -> Any:
    """``pd.Series(values).array`` for a sequence of values: pandas' string array when
    every value is a ``str`` (built by pyarrow in one pass, no check of each value's
    type in Python), else whatever pandas infers (None, NaN, numbers, bytes...)."""
    import pandas as pd

    obj = np.asarray(values, dtype=object)
    if obj.ndim == 1 and len(obj):
        import pyarrow as pa

        try:
            arr = pa.array(obj)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            arr = None
        if arr is not None and pa.types.is_string(arr.type) and arr.null_count == 0:
            dtype = pd.Series(np.array(["x"], dtype=object)).dtype  # pandas' str type
            if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
                return pd.arrays.ArrowStringArray(arr, dtype=dtype)
    return pd.Series(obj).array


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

    paths: np.ndarray | StringColumn
    path_col: StringColumn
    store_col: StringColumn
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
    mined: MinedPairs, fmt: str, store_id: str, paths: np.ndarray | StringColumn,
    flag_columns: bool = False
) -> pd.DataFrame:
    """The pair table of ``mined`` in ``fmt`` (one of :data:`FORMATS`).

    ``paths`` (N,) object: the store's item paths (or their :class:`StringColumn`, made
    once for many tables: :meth:`StringColumn.of_arrow`). ``flag_columns`` adds
    ``false_negative`` and ``fn_reason`` (always added when attracted rows exist).
    Rows are ordered by anchor, then by negative rank. The table's columns may share
    memory with ``mined``'s arrays (5 M rows are not copied): change neither in place.
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {fmt}")
    parts = _table_parts(mined, store_id, paths, flag_columns)
    if fmt == "triplet":
        return _triplet_table(mined, parts)
    if fmt == "labeled-pair":
        return _labeled_pair_table(mined, parts)
    return _n_tuple_table(mined, parts, store_id)


def _table_parts(mined: MinedPairs, store_id: str, paths: np.ndarray | StringColumn,
                 flag_columns: bool) -> _TableParts:
    if isinstance(paths, StringColumn):
        path_col = paths
    else:
        paths = np.asarray(paths, dtype=object)
        path_col = StringColumn(paths)
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
    return _TableParts(paths, path_col, StringColumn([store_id]), n, k,
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
    ok = mined.neg_ids >= 0
    if not len(fn_rows) and bool(ok.all()):  # every anchor has K negatives, nothing added
        def by_row(x: np.ndarray) -> np.ndarray:  # np.repeat(x, k), by one strided copy
            x = np.asarray(x)
            out = np.empty((n, k), dtype=x.dtype)
            out[:] = x[:, None]
            return out.reshape(-1)

        def joined(x: np.ndarray, extra: np.ndarray, dtype: Any) -> np.ndarray:
            return np.asarray(x).reshape(-1).astype(dtype, copy=False)  # a view of x
    else:
        r, c = np.nonzero(ok)  # rows in anchor order
        rows = np.concatenate([r, fn_rows])

        def by_row(x: np.ndarray) -> np.ndarray:
            return np.asarray(x)[rows]

        def joined(x: np.ndarray, extra: np.ndarray, dtype: Any) -> np.ndarray:
            return np.concatenate([np.asarray(x)[r, c], extra]).astype(dtype, copy=False)

    neg = joined(mined.neg_ids, fn_ids, np.int64)
    anchor_ids, positive_ids = by_row(mined.anchors), by_row(mined.positives)
    # copy=False: pandas leaves the columns apart instead of copying the numeric ones
    # into one block per type (the negatives' columns may be views of mined's arrays)
    df = pd.DataFrame({
        "store_id": store_col.repeat(len(neg)),
        "anchor_id": anchor_ids,
        "positive_id": positive_ids,
        "negative_id": neg,
        "anchor_path": path_col.take(anchor_ids),
        "positive_path": path_col.take(positive_ids),
        "negative_path": path_col.take(neg),
        "pos_score": cosines(by_row(mined.pos_scores)),
        "neg_score": cosines(joined(mined.neg_scores, fn_scores, np.float32)),
        "neg_rank": joined(mined.neg_ranks, fn_ranks, np.int64),
    }, copy=False)
    if flags:
        df["false_negative"] = joined(neg_flags, np.ones(len(fn_rows), bool), bool)
        df["fn_reason"] = _nullable(joined(neg_reasons, fn_reasons, object))
    if not len(fn_rows):  # rows of np.nonzero (or every row): in anchor order already
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
        "score": cosines(score),
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
        "pos_score": cosines(mined.pos_scores),
    }
    neg_scores = np.where(mined.neg_ids >= 0, mined.neg_scores, np.nan)
    for j in range(k):
        data[f"negative_id_{j + 1}"] = mined.neg_ids[:, j]
    for j in range(k):
        data[f"negative_path_{j + 1}"] = _paths(paths, mined.neg_ids[:, j])
    for j in range(k):
        data[f"neg_score_{j + 1}"] = cosines(neg_scores[:, j])
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
            "anchor_path": _values(paths, mined.anchors[fn_rows]),
            "positive_path": _values(paths, mined.positives[fn_rows]),
            "pos_score": cosines(mined.pos_scores[fn_rows]),
        }
        m = len(fn_rows)
        for j in range(k):
            extra[f"negative_id_{j + 1}"] = fn_ids if j == 0 else np.full(m, -1, np.int64)
        for j in range(k):
            extra[f"negative_path_{j + 1}"] = _nullable(_values(paths, fn_ids) if j == 0
                                                        else np.full(m, None, dtype=object))
        for j in range(k):
            extra[f"neg_score_{j + 1}"] = (cosines(fn_scores) if j == 0
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
                        paths: np.ndarray | StringColumn) -> pd.DataFrame:
    """``table`` (from :func:`build_pair_table`) with one extra row per mined positive.

    ``rows`` index into ``anchors``; ``ids``, ``scores``, ``confidence``, ``reasons`` are
    the mined positives (pairkit.mine.positives.MinedPositives). Every row gets
    ``positive_kind`` (``view``: the other view of the anchor's source, ``mined``),
    ``positive_reason`` and ``positive_confidence`` (null for view rows). A mined row has
    no negative (triplet: ``negative_id`` -1 and null path/score; n-tuple: every slot
    empty; labeled-pair: ``label`` 1 with ``other_id`` the positive). Labeled-pair rows
    whose other is no positive of the relation (negatives, and attracted rows: a flagged
    candidate, ``false_negative`` true, as triplet marks it) get a null ``positive_kind``.
    Rows stay grouped by anchor: its view rows first, then its mined positives.
    """
    import pandas as pd

    column = paths if isinstance(paths, StringColumn) else None
    array = None if column is not None else np.asarray(paths, dtype=object)

    def path_of(of: np.ndarray) -> np.ndarray:
        return column.values(of) if column is not None else array[of]  # type: ignore[index]

    m = len(ids)
    ids = np.asarray(ids, dtype=np.int64)
    a = np.asarray(anchors, dtype=np.int64)[rows]
    if fmt == "labeled-pair":
        extra: dict[str, Any] = {"store_id": store_id, "anchor_id": a, "other_id": ids,
                                 "anchor_path": path_of(a), "other_path": path_of(ids),
                                 "label": np.ones(m, np.int64),
                                 "score": cosines(scores)}
    else:
        extra = {"store_id": store_id, "anchor_id": a, "positive_id": ids,
                 "anchor_path": path_of(a), "positive_path": path_of(ids),
                 "pos_score": cosines(scores)}
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
        if "false_negative" in base.columns:  # attracted rows: the other is a candidate
            is_pos &= ~base["false_negative"].to_numpy(dtype=bool)
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


def integer_ids(raw: pd.Series, column: str, allow_missing: bool,
                table: str = "pair table") -> np.ndarray:
    """A pair-table id column as int64 (n,): with ``allow_missing`` an empty cell is -1 (no
    negative there). A value that is not a whole number (``'oops'``, ``1.5``, or an empty
    cell where an id is required) is a PairkitError naming the column and row, the same in
    train and report; ``table`` is the kind of table the message names (``dedup table``,
    ``search table``)."""
    import pandas as pd

    values = pd.to_numeric(raw, errors="coerce")
    if allow_missing:
        # only an empty cell means "none"; a value that is not a number is an error (it
        # was read as missing once, and its negatives silently dropped)
        empty = raw.isna() | (raw.astype(str).str.strip() == "") if raw.dtype == object \
            else raw.isna()
        values = values.where(~empty, -1)

    def first(mask: pd.Series) -> tuple[int, Any]:  # the first row flagged, its cell
        row = int(np.flatnonzero(mask.to_numpy())[0])
        value = raw.iloc[row]
        return row, value.item() if isinstance(value, np.generic) else value

    bad = values.isna() | (values != values.round())
    if bool(bad.any()):
        row, value = first(bad)
        raise PairkitError(f"{table}: column {column} must hold integer ids, got "
                           f"{value!a} (row {row})")
    # past int64 (or infinite) the cast would wrap to -2**63 with numpy's warning
    huge = values.abs() >= 2.0**63
    if bool(huge.any()):
        row, value = first(huge)
        raise PairkitError(f"{table}: column {column} holds {value!a} (row {row}), not a "
                           "store row id")
    return values.to_numpy(dtype=np.int64)
