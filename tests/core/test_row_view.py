"""RowView and GatheredRows (pairkit/core/row_view.py) against numpy indexing of the
array they stand for: a store's rows read in place, through a function, pickled as the
store's location (a worker reads them itself), never as rows."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from pairkit.core.row_view import GatheredRows, Reindexed, RowView, is_view, store_view
from pairkit.core.store_rows import LOADED
from pairkit.core.store_writer import write_store


@pytest.fixture
def stored(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6)).astype(np.float32)
    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(50)]})
    st = write_store(tmp_path / "st", x, items, dtype="float16", shard_rows=16)
    return st, st.vectors(np.float32)


def test_indexing_is_numpys(stored):
    st, x = stored
    view = store_view(st)
    assert is_view(view) and not is_view(x)
    assert view.shape == x.shape and len(view) == 50 and view.dtype == np.float32
    mask = np.arange(50) % 3 == 0
    for key in (7, -1, slice(3, 40, 4), slice(None), np.array([49, 0, 17, 17, 33]),
                np.array([-2, 5]), mask, np.zeros(0, np.int64)):
        np.testing.assert_array_equal(view[key], x[key])
    np.testing.assert_array_equal(np.asarray(view), x)
    for bad in (np.array([50]), np.array([-51]), np.ones(3, bool), np.array([1.5])):
        with pytest.raises(IndexError):
            view[bad]


def test_subset_and_mapped_compose(stored):
    st, x = stored
    ids = np.array([40, 2, 9, 31, 31, 11, 0])
    sub = store_view(st).subset(ids)
    assert len(sub) == 7
    np.testing.assert_array_equal(np.asarray(sub), x[ids])
    inner = sub.subset(np.array([True, False, True, False, True, False, True]))
    np.testing.assert_array_equal(np.asarray(inner), x[ids][::2])
    np.testing.assert_array_equal(inner.store_ids(), ids[::2])
    w = np.arange(18, dtype=np.float32).reshape(6, 3)
    mapped = sub.mapped(lambda r: r @ w, 3).mapped(lambda r: r * 2, 3)
    assert mapped.shape == (7, 3)
    np.testing.assert_allclose(mapped[np.array([1, 6])], (x[ids][[1, 6]] @ w) * 2, rtol=1e-6)
    np.testing.assert_allclose(mapped.subset(slice(2, 4))[0], (x[ids[2]] @ w) * 2, rtol=1e-6)
    # blocks: consecutive, in order
    starts = [(start, len(b)) for start, b in sub.blocks(3)]
    assert starts == [(0, 3), (3, 3), (6, 1)]


def test_a_read_is_one_take_of_the_shards(stored, monkeypatch):
    """One read of scattered rows is one call on the shards' rows (each shard visited
    once: ShardRows.take), whatever the order of the ids."""
    st, x = stored
    view = store_view(st)
    calls = []
    rows = view.base()
    real = type(rows).take

    def counted(self, ids):
        calls.append(len(ids))
        return real(self, ids)

    monkeypatch.setattr(type(rows), "take", counted)
    got = view[np.array([45, 1, 20, 33, 1])]
    np.testing.assert_array_equal(got, x[[45, 1, 20, 33, 1]])
    assert calls == [5]


def test_pickled_view_reads_the_store_itself(stored):
    """Pickled, a view carries the store's location and its ids, not rows; unpickled
    (a worker) it opens the store and reads the same values."""
    st, x = stored
    ids = np.arange(0, 50, 2)
    view = store_view(st).subset(ids).mapped(np.negative, 6)
    data = pickle.dumps(view)
    for rows in (x[ids], x[ids].astype(np.float16), x):  # no rows in the pickle
        assert rows[:2].tobytes() not in data
    LOADED.clear()  # a new process: nothing read yet
    try:
        there = pickle.loads(data)
        assert there.rows is None
        np.testing.assert_array_equal(np.asarray(there), -x[ids])
        assert len(LOADED) == 1
    finally:
        LOADED.clear()


def test_gathered_rows_answer_only_what_was_gathered(stored):
    st, x = stored
    view = store_view(st)
    g = view.gather(np.array([30, 3, 3, 12]))
    assert isinstance(g, GatheredRows) and g.shape == (50, 6) and len(g) == 50
    np.testing.assert_array_equal(g[np.array([12, 30, 3, 30])], x[[12, 30, 3, 30]])
    np.testing.assert_array_equal(g[12], x[12])
    assert g[np.zeros(0, np.int64)].shape == (0, 6)
    # a slice, as row_dots reads evenly spaced rows (every other row: a source's views)
    np.testing.assert_array_equal(g[12:31:18], x[12:31:18])
    with pytest.raises(IndexError, match="not gathered"):
        g[3:13]
    for bad in (np.array([4]), np.array([49]), np.array([12, 13])):
        with pytest.raises(IndexError, match="not gathered"):
            g[bad]
    empty = view.gather(np.zeros(0, np.int64))
    with pytest.raises(IndexError):
        empty[np.array([0])]
    units = Reindexed(g, np.array([3, 12, 30]))
    np.testing.assert_array_equal(units[np.array([2, 0])], x[[30, 3]])
    assert len(units) == 3


def test_view_of_an_array():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    view = RowView(x)
    np.testing.assert_array_equal(view[np.array([3, 1])], x[[3, 1]])
    np.testing.assert_array_equal(np.asarray(view.subset(slice(1, 3))), x[1:3])
    with pytest.raises(ValueError):
        RowView(object(), dim=3)  # a store's rows need their ids or the opened rows
    # mutation audit 4a (RV1): a negative position counts from the end, as numpy's, also
    # in the ids a subset keeps (the store rows a search or a table names)
    assert view.positions(np.array([-1, 0, -4])).tolist() == [3, 0, 0]
    tail = view.subset(np.array([-1, -3]))
    assert tail.store_ids().tolist() == [3, 1]
    np.testing.assert_array_equal(np.asarray(tail.subset(np.array([-1]))), x[[1]])
    assert tail.subset(np.array([-1])).store_ids().tolist() == [1]


def test_a_store_replaced_after_the_run_took_its_rows_is_refused(tmp_path):
    """A worker opens the store by its location and checks it is still the one the
    driver read (its content id): a store replaced meanwhile (--force, other rows) is
    refused in one line, never read as the run's (hunt 3b: dropping the check survived)."""
    from pairkit.core.store_rows import StoreRows
    from pairkit.errors import PairkitError

    items = pd.DataFrame({"path": [f"{i}.jpg" for i in range(4)]})
    st = write_store(tmp_path / "st", np.eye(4, dtype=np.float32), items)
    rows = StoreRows.of(st)
    assert rows.open(verify=True).content_id == st.content_id
    write_store(tmp_path / "st", np.eye(4, dtype=np.float32)[::-1].copy(), items, force=True)
    with pytest.raises(PairkitError, match="changed while it was being read"):
        rows.open(verify=True)
