"""Pair tables (pairkit/core/pairs.py): columns taken from one array of the store's
paths are the columns pandas infers from the paths themselves, down to the parquet bytes."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from pairkit.core.pairs import FORMATS, MinedPairs, build_pair_table


def mined(attract: bool) -> MinedPairs:
    rng = np.random.default_rng(0)
    n, k, n_items = 30, 3, 80
    neg = rng.integers(0, n_items, (n, k))
    neg[rng.random((n, k)) < 0.2] = -1
    m = MinedPairs(np.arange(n), np.arange(n) + 40, rng.random(n).astype(np.float32), neg,
                   np.where(neg >= 0, rng.random((n, k)), np.nan).astype(np.float32),
                   np.where(neg >= 0, np.arange(k)[None, :], -1),
                   neg_flags=rng.random((n, k)) < 0.3,
                   neg_reasons=np.full((n, k), "label", dtype=object))
    m.neg_reasons = np.where(m.neg_flags, m.neg_reasons, None)
    if attract:
        m.fn_rows = np.array([2, 2, 7])
        m.fn_ids = np.array([11, 12, 13])
        m.fn_scores = np.array([0.9, 0.8, 0.7], np.float32)
        m.fn_ranks = np.full(3, -1)
        m.fn_reasons = np.array(["label", "cluster", "label|cluster"], dtype=object)
    return m


def inferred(table: pd.DataFrame) -> pd.DataFrame:
    """The same table with its string columns rebuilt from Python objects (pandas infers
    their type, as for a column of paths; object columns of None-or-text stay object)."""
    return pd.DataFrame({c: (table[c].to_numpy(dtype=object)
                             if table[c].dtype != object and pd.api.types.is_string_dtype(table[c])
                             else table[c]) for c in table.columns})


def parquet(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("attract", [False, True])
@pytest.mark.parametrize("flags", [False, True])
def test_path_columns_are_the_inferred_ones(fmt: str, attract: bool, flags: bool) -> None:
    paths = np.array([f"class{i % 4}/img_{i:03d}.jpg" for i in range(80)], dtype=object)
    table = build_pair_table(mined(attract), fmt, "0123abcd", paths, flag_columns=flags)
    ref = inferred(table)
    pd.testing.assert_frame_equal(table, ref, check_exact=True)
    assert parquet(table) == parquet(ref)
    # and the paths are the right ones
    ids = [c for c in table.columns if c.endswith("_id") and c != "store_id"]
    for c in ids:
        col = c.replace("_id", "_path")
        got = table[col].to_numpy(dtype=object)
        want = np.array([paths[i] if i >= 0 else None for i in table[c]], dtype=object)
        assert [None if isinstance(v, float) else v for v in got] == list(want)
    assert (table["store_id"] == "0123abcd").all()
