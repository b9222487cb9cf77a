"""CodedRows: rows stored once per code, indexed as the full array would be."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pairkit.core.coded_rows import CodedRows, CodedRuns, code_dtype, coded_products
from pairkit.index.outside import far_in


def example(n: int = 500, table_rows: int = 30, dims: int = 5, seed: int = 0
            ) -> tuple[CodedRows, np.ndarray]:
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(table_rows, dims))
    table = (table / np.linalg.norm(table, axis=1, keepdims=True)).astype(np.float16)
    codes = rng.integers(0, table_rows, n).astype(np.int16)
    full = np.stack([table[c] for c in codes])  # by hand, row by row
    return CodedRows(codes, table), full


def test_indexing_equals_the_full_array():
    x, full = example()
    assert x.shape == full.shape and len(x) == 500 and x.dtype == np.float16 and x.ndim == 2
    np.testing.assert_array_equal(np.asarray(x), full)
    assert np.asarray(x, dtype=np.float32).dtype == np.float32
    ids = np.array([499, 0, 7, 7, -1])
    mask = np.arange(500) % 3 == 0
    for key in (ids, mask, slice(10, 40, 3), slice(None), 17, np.int64(3)):
        np.testing.assert_array_equal(x[key], full[key])
    np.testing.assert_array_equal(x[ids.reshape(-1, 1)], full[ids.reshape(-1, 1)])
    assert x.nbytes == 500 * 2 + 30 * 5 * 2  # codes and table, not 500 rows
    y = pickle.loads(pickle.dumps(x))
    np.testing.assert_array_equal(np.asarray(y), full)


def test_bad_codes_and_columns_refused():
    table = np.eye(3, dtype=np.float16)
    with pytest.raises(ValueError, match="lie in"):
        CodedRows(np.array([0, 3]), table)
    with pytest.raises(ValueError, match="lie in"):
        CodedRows(np.array([-1, 0]), table)
    with pytest.raises(ValueError, match="integers"):
        CodedRows(np.array([0.0, 1.0]), table)
    with pytest.raises(IndexError):
        CodedRows(np.array([0, 1]), table)[0, 1]


def test_code_dtype():
    assert code_dtype(1) == np.int16 and code_dtype(32_768) == np.int16
    assert code_dtype(32_769) == np.int32 and code_dtype(2**31 + 1) == np.int64


def test_coded_products_and_far_in_equal_the_dense_ones():
    x, full = example(n=400, table_rows=25, dims=4, seed=3)
    f = full.astype(np.float32)
    rng = np.random.default_rng(4)
    rows, cols = rng.integers(0, 400, 37), rng.integers(0, 400, 91)
    ref = f[rows] @ f[cols].T
    np.testing.assert_allclose(coded_products(x, rows, cols), ref, atol=1e-6)
    cos = f[rows] @ f.T
    for threshold in (0.2, 0.5, 0.9):
        # not at a cosine within rounding of the threshold (where the two products may
        # part in the last bit: the searches' margin covers that)
        assert np.abs(cos - threshold).min() > 1e-5
        np.testing.assert_array_equal(far_in(x, rows, threshold), far_in(full, rows, threshold))
        np.testing.assert_array_equal(far_in(x, rows, threshold, cols),
                                      far_in(full, rows, threshold, cols))
        np.testing.assert_array_equal(far_in(x, rows, threshold, cols), ref < threshold)


def test_coded_runs_index_as_the_full_array():
    rng = np.random.default_rng(5)
    table = rng.integers(0, 9, (3, 40)).astype(np.int16)
    codes = rng.integers(0, 40, 300).astype(np.int16)
    runs = CodedRuns(codes, table)
    full = np.stack([[table[g, c] for c in codes] for g in range(3)])  # by hand
    assert runs.shape == (3, 300) and len(runs) == 3 and runs.dtype == np.int16
    np.testing.assert_array_equal(np.asarray(runs), full)
    ids = np.array([5, 299, 0, 5])
    np.testing.assert_array_equal(runs[:, ids], full[:, ids])
    np.testing.assert_array_equal(runs[1, ids], full[1, ids])
    assert runs[2, 7] == full[2, 7]
    np.testing.assert_array_equal(runs[1:, 10:20], full[1:, 10:20])
    for g, run in enumerate(runs):  # iterated by run, each indexed by rows
        np.testing.assert_array_equal(run[ids], full[g, ids])
        np.testing.assert_array_equal(np.asarray(run), full[g])
        assert len(run) == 300 and run[3] == full[g, 3]
    np.testing.assert_array_equal(np.unique(runs[0]), np.unique(full[0]))
    wider = runs.with_table(table.astype(np.int64))
    assert wider.codes is runs.codes and np.asarray(wider).dtype == np.int64
    assert runs.nbytes == 300 * 2 + 3 * 40 * 2
    with pytest.raises(IndexError):
        runs[ids]  # rows, not runs: refused rather than misread
    with pytest.raises(ValueError, match="lie in"):
        CodedRuns(np.array([40]), table)
