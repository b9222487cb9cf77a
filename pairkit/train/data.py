"""Training examples from a pair table or from a relation, as id arrays.

A batch is built by index gathers into the store's vector matrix (see
:mod:`pairkit.train.epoch`); nothing here touches vectors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.unique import unique_rows
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import pandas as pd

FN_MODES = ("eliminate", "attract", "keep")
RELATIONS = ("instance", "label")


@dataclass(frozen=True)
class PairArrays:
    """M training examples: ``anchor``, ``positive`` (M,) int64 store ids,
    ``negatives`` (M, K) int64 (-1 = none), ``neg_attract`` (M, K) bool
    (a flagged false negative to be treated as a positive)."""

    anchor: np.ndarray
    positive: np.ndarray
    negatives: np.ndarray
    neg_attract: np.ndarray

    def __len__(self) -> int:
        return len(self.anchor)

    def subset(self, rows: np.ndarray) -> PairArrays:
        """The examples at ``rows`` (int or bool index)."""
        return PairArrays(self.anchor[rows], self.positive[rows], self.negatives[rows],
                          self.neg_attract[rows])


@dataclass(frozen=True)
class TableInfo:
    """What was read from a table: its format, counts and notes for the user."""

    kind: str
    rows: int
    flagged: int
    notes: tuple[str, ...]
    # (F, 2) the (anchor, negative) rows flagged and eliminated or attracted: no in-batch
    # negative of that anchor either (pairkit.train.exclusions)
    flagged_pairs: np.ndarray | None = None


def _int_column(df: pd.DataFrame, col: str, allow_missing: bool) -> np.ndarray:
    from pairkit.core.pairs import integer_ids

    return integer_ids(df[col], col, allow_missing)


def _bool_column(df: pd.DataFrame, col: str) -> np.ndarray:
    values = df[col]
    if values.dtype == bool:
        return values.to_numpy()
    text = values.map(lambda v: "" if v is None or v != v else str(v).strip().lower())
    known = text.isin(("true", "1", "1.0", "yes", "false", "0", "0.0", "no", ""))
    if not bool(known.all()):
        row = int(np.flatnonzero(~known.to_numpy())[0])
        raise PairkitError(f"pair table: column {col} must hold true/false, got "
                           f"{values.iloc[row]!a} (row {row})")
    return text.isin(("true", "1", "1.0", "yes")).to_numpy(dtype=bool)


def table_kind(df: pd.DataFrame) -> str:
    """``triplet``, ``n-tuple`` or ``labeled-pair`` from a table's columns."""
    from pairkit.core.table_items import check_negative_columns

    check_negative_columns(list(df.columns))
    cols = set(df.columns)
    if "negative_id" in cols:
        return "triplet"
    if "negative_id_1" in cols:
        return "n-tuple"
    if "other_id" in cols:
        return "labeled-pair"
    names = [str(c) for c in df.columns]
    got = ", ".join(names[:12]) or "none"
    if len(names) > 12:
        got += f", ... ({len(names):,} columns)"
    raise PairkitError(
        "pair table has neither negative_id (triplet) nor negative_id_1.. (n-tuple) columns: "
        f"got {got}"
    )


def check_store_id(row: dict[str, Any], content_id: str) -> None:
    """Refuse a pair-table row whose ``store_id`` is not ``content_id`` (a row without one
    passes): the check :func:`pairkit.core.tables.read_table` runs on a table's first row
    before reading the rest."""
    from pairkit.core.tables import named_store_ids

    value = row.get("store_id")
    if named_store_ids([value]) - {content_id}:
        raise PairkitError(
            f"pair table came from another store (store_id {value}, this store is "
            f"{content_id}): mine pairs on this store")


def pairs_from_table(df: pd.DataFrame, store_count: int, content_id: str,
                     fn_mode: str = "eliminate") -> tuple[PairArrays, TableInfo]:
    """Read a triplet or n-tuple table into :class:`PairArrays`.

    Triplet rows that share (anchor_id, positive_id) are gathered into one
    example with all their negatives. Rows flagged ``false_negative`` are
    dropped from the negatives (``eliminate``), made positives (``attract``) or
    used as ordinary negatives (``keep``). Raises PairkitError on a table from
    another store, ids out of range, or missing columns.
    """
    if fn_mode not in FN_MODES:
        raise PairkitError(f"--fn-mode must be one of {', '.join(FN_MODES)}, got {fn_mode}")
    if len(df) == 0:
        raise PairkitError("pair table is empty")
    from pairkit.core.tables import named_store_ids

    notes: list[str] = []
    ids = named_store_ids(df["store_id"].unique()) if "store_id" in df.columns else set()
    for other in sorted(ids - {content_id})[:1]:
        check_store_id({"store_id": other}, content_id)
    if not ids:  # no column, or one of empty cells
        notes.append("pair table has no store_id column: can't check it belongs to this store"
                     if "store_id" not in df.columns else
                     "pair table has no store_id (its column is empty): can't check it "
                     "belongs to this store")
    kind = table_kind(df)
    if kind == "labeled-pair":
        raise PairkitError(
            "train reads triplet or n-tuple pair tables; this is a labeled-pair table "
            "(mine with --format triplet or n-tuple)"
        )
    for col in ("anchor_id", "positive_id"):
        if col not in df.columns:
            raise PairkitError(f"pair table lacks column {col}")
    anchor = _int_column(df, "anchor_id", False)
    positive = _int_column(df, "positive_id", False)
    if fn_mode != "eliminate" and "false_negative" not in df.columns:
        notes.append(f"--fn-mode {fn_mode}: the table has no false_negative column (mine "
                     "with --filter-false-negatives --fn-mode keep): nothing to "
                     f"{'attract' if fn_mode == 'attract' else 'keep'}")
    if kind == "triplet":
        neg = _int_column(df, "negative_id", True)[:, None]
        flags = (_bool_column(df, "false_negative")[:, None] if "false_negative" in df.columns
                 else np.zeros_like(neg, dtype=bool))
    else:
        cols = sorted((c for c in df.columns if re.fullmatch(r"negative_id_\d+", str(c))),
                      key=lambda c: int(str(c).rsplit("_", 1)[1]))
        neg = np.stack([_int_column(df, c, True) for c in cols], axis=1)
        flags = np.zeros_like(neg, dtype=bool)
        if "false_negative" in df.columns:
            # mine flags n-tuple rows, not slots: a flagged row with one negative (an
            # attracted candidate, or a row with one negative left) flags that negative;
            # with several negatives we can't tell which one, so none is used as a negative.
            row_flag = _bool_column(df, "false_negative")
            n_valid = (neg >= 0).sum(axis=1)
            flags = row_flag[:, None] & (neg >= 0) & (n_valid == 1)[:, None]
            ambiguous = row_flag & (n_valid > 1)
            if ambiguous.any() and fn_mode != "keep":
                neg = np.where(ambiguous[:, None], -1, neg)
                notes.append(
                    f"{int(ambiguous.sum())} n-tuple rows are flagged false_negative with several"
                    " negatives (which one is unknown): their negatives are not used; mine with "
                    "--format triplet for per-negative flags")
    for name, values in (("anchor_id", anchor), ("positive_id", positive), ("negative_id", neg)):
        low = -1 if name == "negative_id" else 0
        bad = (values < low) | (values >= store_count)
        if bool(bad.any()):
            row = int(np.flatnonzero(bad.reshape(len(values), -1).any(axis=1))[0])
            value = int(values.reshape(len(values), -1)[row][bad.reshape(len(values), -1)[row]][0])
            raise PairkitError(
                f"pair table: {name} {value} is out of range for a store of {store_count} "
                f"items (row {row}): the table doesn't fit this store"
            )
    same = np.flatnonzero(anchor == positive)
    if len(same):
        raise PairkitError(f"pair table: row {int(same[0])} has anchor_id == positive_id "
                           f"({int(anchor[same[0]])}): an item is not its own positive")
    flags = flags & (neg >= 0)
    n_flagged = int(flags.sum())
    rows, slots = np.nonzero(flags)
    flagged_pairs = (np.stack([anchor[rows], neg[rows, slots]], axis=1).astype(np.int64)
                     if fn_mode != "keep" else np.zeros((0, 2), np.int64))
    attract = np.zeros_like(flags)
    if fn_mode == "eliminate":
        neg = np.where(flags, -1, neg)
    elif fn_mode == "attract":
        attract = flags.copy()
    # rows sharing (anchor, positive) become one example holding all their negatives
    k = neg.shape[1]
    anchor, positive, neg, attract = _group_triplets(
        np.repeat(anchor, k), np.repeat(positive, k), neg.reshape(-1), attract.reshape(-1))
    info = TableInfo(kind=kind, rows=len(df), flagged=n_flagged, notes=tuple(notes),
                     flagged_pairs=flagged_pairs)
    return PairArrays(anchor, positive, neg, attract), info


def _group_triplets(anchor: np.ndarray, positive: np.ndarray, neg: np.ndarray,
                    attract: np.ndarray) -> tuple[np.ndarray, ...]:
    """Gather (anchor, positive, negative) rows sharing (anchor, positive) into rows of K
    negatives (-1 padded; padding, eliminated slots and repeats of a row are dropped
    first)."""
    real = neg >= 0
    # keep one padded row for pairs whose negatives are all gone: in-batch negatives apply
    first = np.zeros(len(neg), dtype=bool)
    if len(neg):
        idx = unique_rows(np.stack([anchor, positive], axis=1))[1]
        first[idx] = True
    keep = real | first
    if real.any():  # a (anchor, positive, negative) row repeated counts once (a table
        # concatenated with itself), as a repeated mined positive does
        rows = np.flatnonzero(real)
        once = unique_rows(np.stack([anchor[rows], positive[rows], neg[rows]], axis=1))[1]
        repeated = np.ones(len(neg), dtype=bool)
        repeated[rows[once]] = False
        keep &= ~(real & repeated)
    anchor, positive, neg, attract = anchor[keep], positive[keep], neg[keep], attract[keep]
    keys = np.stack([anchor, positive], axis=1)
    uniq, _, inverse = unique_rows(keys)
    order = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse, minlength=len(uniq))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot = np.empty(len(inverse), dtype=np.int64)
    slot[order] = np.arange(len(inverse)) - np.repeat(starts, counts)
    k = int(counts.max())
    negs = np.full((len(uniq), k), -1, dtype=np.int64)
    att = np.zeros((len(uniq), k), dtype=bool)
    negs[inverse, slot] = neg
    att[inverse, slot] = attract
    # left-pack real negatives (the kept padding slot may sit before them)
    order = np.argsort(negs < 0, axis=1, kind="stable")
    negs = np.take_along_axis(negs, order, axis=1)
    att = np.take_along_axis(att, order, axis=1)
    width = max(int((negs >= 0).sum(axis=1).max()), 0)
    return uniq[:, 0].copy(), uniq[:, 1].copy(), negs[:, :width], att[:, :width]


def relation_groups(sources: np.ndarray, labels: np.ndarray | None, relation: str) -> np.ndarray:
    """Group id per item (N,) int64: items sharing an id are positives of each other.

    ``instance``: the source code; ``label``: the label (an unlabeled item is
    a group of its own).
    """
    if relation not in RELATIONS:
        raise PairkitError(f"--relation must be one of {', '.join(RELATIONS)}, got {relation}")
    if relation == "instance":
        return np.asarray(sources, dtype=np.int64)
    if labels is None:
        raise PairkitError("--relation label needs a store with labels (embed --labels ...)")
    from pairkit.core.store import codes_of

    codes, uniques = codes_of(labels)
    missing = codes < 0
    codes[missing] = len(uniques) + np.flatnonzero(missing)
    return codes


def sample_relation_pairs(groups: np.ndarray, eligible: np.ndarray,
                          rng: np.random.Generator) -> PairArrays:
    """One example per eligible item that has another eligible item in its group.

    The positive is a uniformly drawn other member of the group. Returns
    :class:`PairArrays` with K = 0 negatives (in-batch negatives only).
    """
    ids = np.flatnonzero(eligible)
    g = groups[ids]
    order = np.lexsort((ids, g))
    ids, g = ids[order], g[order]
    _, starts, counts = np.unique(g, return_index=True, return_counts=True)
    size = np.repeat(counts, counts)
    start = np.repeat(starts, counts)
    pos_in_group = np.arange(len(ids)) - start
    keep = size > 1
    offset = 1 + np.floor(rng.random(len(ids)) * np.maximum(size - 1, 1)).astype(np.int64)
    partner = start + (pos_in_group + offset) % np.maximum(size, 1)
    anchor = ids[keep]
    positive = ids[partner[keep]]
    m = len(anchor)
    return PairArrays(anchor, positive, np.full((m, 0), -1, dtype=np.int64),
                      np.zeros((m, 0), dtype=bool))


def restrict(pairs: PairArrays, allowed: np.ndarray) -> PairArrays:
    """Examples whose anchor and positive are ``allowed`` items; other negatives -> -1.

    ``allowed``: bool (N,) over store items.
    """
    rows = allowed[pairs.anchor] & allowed[pairs.positive]
    sub = pairs.subset(rows)
    ok = (sub.negatives >= 0) & allowed[np.maximum(sub.negatives, 0)]
    return PairArrays(sub.anchor, sub.positive, np.where(ok, sub.negatives, -1),
                      sub.neg_attract & ok)
