"""The pair table against the plain form it replaced (pairkit before the vectorised
table, commit 6cf7860): object columns of Python strings, pandas inference and block
consolidation, one fancy index per column. Same frames, same parquet bytes; and the
pieces that build the columns (the inferred string array, the repeated store id, the
take from the system allocator) against pandas' own."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

import pairkit.core.pairs as pairs_mod
from pairkit.core.pairs import MinedPairs, StringColumn, build_pair_table, inferred_array


def _nullable(values: object) -> pd.Series:
    return pd.Series(np.asarray(values, dtype=object), dtype=object)


def plain_table(mined: MinedPairs, fmt: str, store_id: str, paths: np.ndarray,
                flag_columns: bool = False) -> pd.DataFrame:
    """build_pair_table of commit 6cf7860 (triplet and labeled-pair), verbatim in effect."""
    paths = np.asarray(paths, dtype=object)
    n, k = mined.neg_ids.shape
    has_attract = mined.fn_ids is not None and len(mined.fn_ids) > 0
    flags = flag_columns or has_attract
    neg_flags = mined.neg_flags if mined.neg_flags is not None else np.zeros((n, k), bool)
    neg_reasons = (mined.neg_reasons if mined.neg_reasons is not None
                   else np.full((n, k), None, dtype=object))
    if has_attract:
        fn = (mined.fn_rows, mined.fn_ids, mined.fn_scores, mined.fn_ranks, mined.fn_reasons)
    else:
        e = np.zeros(0, dtype=np.int64)
        fn = (e, e, np.zeros(0, np.float32), e, np.zeros(0, dtype=object))
    fn_rows, fn_ids, fn_scores, fn_ranks, fn_reasons = fn
    fn_rows = np.asarray(fn_rows, dtype=np.int64)
    r, c = np.nonzero(mined.neg_ids >= 0)
    if fmt == "triplet":
        rows = np.concatenate([r, fn_rows])
        neg = np.concatenate([mined.neg_ids[r, c], fn_ids]).astype(np.int64)
        df = pd.DataFrame({
            "store_id": store_id,
            "anchor_id": mined.anchors[rows],
            "positive_id": mined.positives[rows],
            "negative_id": neg,
            "anchor_path": paths[mined.anchors[rows]],
            "positive_path": paths[mined.positives[rows]],
            "negative_path": paths[neg],
            "pos_score": mined.pos_scores[rows].astype(np.float32),
            "neg_score": np.concatenate([mined.neg_scores[r, c], fn_scores]).astype(np.float32),
            "neg_rank": np.concatenate([mined.neg_ranks[r, c], fn_ranks]).astype(np.int64),
        })
        if flags:
            df["false_negative"] = np.concatenate([neg_flags[r, c], np.ones(len(fn_rows), bool)])
            df["fn_reason"] = _nullable(np.concatenate([neg_reasons[r, c], fn_reasons]))
        order = np.argsort(rows, kind="stable")
        return df.iloc[order].reset_index(drop=True)
    assert fmt == "labeled-pair"
    rows = np.concatenate([np.arange(n), r, fn_rows])
    other = np.concatenate([mined.positives, mined.neg_ids[r, c], fn_ids]).astype(np.int64)
    label = np.concatenate([np.ones(n, np.int64), np.zeros(len(r), np.int64),
                            np.ones(len(fn_rows), np.int64)])
    score = np.concatenate([mined.pos_scores, mined.neg_scores[r, c], fn_scores])
    kind_order = np.concatenate([np.zeros(n), np.ones(len(r)), np.full(len(fn_rows), 2)])
    df = pd.DataFrame({
        "store_id": store_id, "anchor_id": mined.anchors[rows], "other_id": other,
        "anchor_path": paths[mined.anchors[rows]], "other_path": paths[other],
        "label": label, "score": score.astype(np.float32),
    })
    if flags:
        df["false_negative"] = np.concatenate(
            [np.zeros(n, bool), neg_flags[r, c], np.ones(len(fn_rows), bool)])
        df["fn_reason"] = _nullable(np.concatenate(
            [np.full(n, None, dtype=object), neg_reasons[r, c], fn_reasons]))
    return df.iloc[np.lexsort((kind_order, rows))].reset_index(drop=True)


def parquet(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def mined(n: int, k: int, n_items: int, short: float, attract: bool, seed: int) -> MinedPairs:
    rng = np.random.default_rng(seed)
    anchors = np.sort(rng.choice(n_items, n, replace=False)).astype(np.int64)
    neg = rng.integers(0, n_items, (n, k)).astype(np.int64)
    neg[rng.random((n, k)) < short] = -1
    flags = (rng.random((n, k)) < 0.3) & (neg >= 0)
    m = MinedPairs(anchors, rng.integers(0, n_items, n).astype(np.int64),
                   rng.random(n).astype(np.float32), neg,
                   np.where(neg >= 0, rng.random((n, k)), np.nan).astype(np.float32),
                   np.where(neg >= 0, rng.integers(0, 50, (n, k)), -1).astype(np.int64),
                   neg_flags=flags,
                   neg_reasons=np.where(flags, "near_duplicate|cluster", None).astype(object))
    if attract:
        m.fn_rows = np.sort(rng.integers(0, n, 7))
        m.fn_ids = rng.integers(0, n_items, 7).astype(np.int64)
        m.fn_scores = rng.random(7).astype(np.float32)
        m.fn_ranks = np.full(7, -1, np.int64)
        m.fn_reasons = np.array(["label"] * 7, dtype=object)
    return m


PATHS = np.array([f"src{i // 2:05d}/view{i % 2}.jpg" if i % 7 else f"d/é {i}.png"
                  for i in range(300)], dtype=object)


@pytest.mark.parametrize("fmt", ["triplet", "labeled-pair"])
@pytest.mark.parametrize(("n", "k", "short", "attract"), [
    (200, 5, 0.0, False),   # every anchor has K: the repeat/ravel path
    (200, 1, 0.0, False),   # K = 1: the ravel is the array itself
    (200, 5, 0.2, False),   # short anchors: the nonzero path
    (200, 5, 0.0, True),    # attracted rows
    (120, 3, 0.3, True),
    (0, 5, 0.0, False),     # no anchors
    (50, 4, 1.0, False),    # no negatives at all
])
@pytest.mark.parametrize("flags", [False, True])
def test_table_is_the_plain_one(fmt: str, n: int, k: int, short: float, attract: bool,
                                flags: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # a small chunk, so the store id column is many chunks of one block (and a rest)
    monkeypatch.setattr(pairs_mod, "REPEAT_CHUNK", 64)
    m = mined(n, k, len(PATHS), short, attract, seed=n + k)
    got = build_pair_table(m, fmt, "0123456789abcdef", PATHS, flag_columns=flags)
    want = plain_table(m, fmt, "0123456789abcdef", PATHS, flag_columns=flags)
    if not len(want):
        # an empty table: the plain form's path and store-id columns were untyped (object,
        # Arrow's null type in parquet); since 7cf54a4 they are pandas' string type
        text = [c for c in want.columns if c == "store_id" or c.endswith("_path")]
        want = want.astype({c: pd.Series(["x"]).dtype for c in text})
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert parquet(got) == parquet(want)
    assert got.to_csv(index=False) == want.to_csv(index=False)


def test_table_leaves_mined_unchanged() -> None:
    m = mined(100, 5, len(PATHS), 0.0, False, seed=3)
    before = {f: np.array(getattr(m, f), copy=True) for f in
              ("anchors", "positives", "pos_scores", "neg_ids", "neg_scores", "neg_ranks")}
    build_pair_table(m, "triplet", "s", PATHS)
    for f, v in before.items():
        np.testing.assert_array_equal(getattr(m, f), v)


@pytest.mark.parametrize("values", [
    ["a", "b/c.jpg", "é"],
    np.array(["x", "y"], dtype=object),
    np.array(["x", "y"]),              # numpy unicode
    ["a", None, "b"],                  # None: pandas' NaN, not Arrow's null path
    ["a", np.nan],
    [1, 2],
    ["a", 1],
    [b"a", b"b"],
    [None, None],
    [],
    ["only"],
])
def test_inferred_array_is_pandas_inference(values: list) -> None:
    got = inferred_array(values)
    want = pd.Series(np.asarray(values, dtype=object)).array
    assert type(got) is type(want) and got.dtype == want.dtype
    pd.testing.assert_series_equal(pd.Series(got), pd.Series(want), check_exact=True)


@pytest.mark.parametrize("m", [0, 1, 63, 64, 65, 128, 200])
def test_repeated_store_id_is_the_inferred_column(m: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pairs_mod, "REPEAT_CHUNK", 64)
    col = StringColumn(["0123456789abcdef"]).repeat(m)
    want = pd.Series(np.full(m, "0123456789abcdef", dtype=object), dtype=pd.Series(["x"]).dtype)
    pd.testing.assert_series_equal(col, want, check_exact=True)
    assert parquet(col.to_frame("s")) == parquet(want.to_frame("s"))


def test_take_is_pandas_take() -> None:
    col = StringColumn(PATHS)
    ids = np.random.default_rng(0).integers(0, len(PATHS), 1000)
    want = pd.Series(pd.Series(PATHS).array.take(ids))
    pd.testing.assert_series_equal(col.take(ids), want, check_exact=True)
    pd.testing.assert_series_equal(col.take(ids[:0]), want[:0], check_exact=True)
    with pytest.raises(IndexError):
        col.take(np.array([len(PATHS)]))
