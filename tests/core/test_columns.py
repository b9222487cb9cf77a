"""Labels and sources as codes (``eval --ray``'s references): the same codes as
``codes_of``, joint codes that keep equality, and the same metrics as object arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pairkit.core.columns import Coded, as_coded, coded_array, joint_codes, value_at
from pairkit.core.store import Store, codes_of
from pairkit.core.store_writer import write_store
from pairkit.eval.command import load_sides
from pairkit.eval.run import EvalConfig, EvalSide, evaluate
from tests.eval.test_run import eval_side


def test_codes_are_those_of_codes_of() -> None:
    values = ["b", None, "a", "b", "c", None, "a", "d"]
    coded = coded_array(pa.array(values, type=pa.string()))
    want, uniques = codes_of(np.array(values, dtype=object))
    np.testing.assert_array_equal(coded.codes, want)  # first appearance: b=0, a=1, c=2, d=3
    np.testing.assert_array_equal(coded.codes, [0, -1, 1, 0, 2, -1, 1, 3])
    assert coded.values.to_pylist() == list(uniques)
    assert list(coded.objects()) == values
    np.testing.assert_array_equal(coded.present(), [0, 1, 2, 3])
    np.testing.assert_array_equal(coded.take(np.array([1, 2, 6])).present(), [1])
    assert value_at(coded.values, 2) == "c" and value_at(uniques, 2) == "c"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_joint_codes_keep_equality_and_missing(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool = [f"s{i}" for i in range(30)] + [None]
    a = np.array([pool[i] for i in rng.integers(0, 25, 200)] + [None], dtype=object)
    b = np.array([pool[i] for i in rng.integers(10, 31, 80)], dtype=object)
    for left, right in [(coded_array(pa.array(list(a), pa.string())),
                         coded_array(pa.array(list(b), pa.large_string()))),
                        (a, coded_array(pa.array(list(b), pa.string()))),
                        (coded_array(pa.array(list(a), pa.string())), b)]:
        ca, cb, values = joint_codes(left, right)
        assert ((ca < 0) == pd.isna(a)).all() and ((cb < 0) == pd.isna(b)).all()
        same = a[:, None] == b[None, :]
        known = ~pd.isna(a)[:, None] & ~pd.isna(b)[None, :]
        np.testing.assert_array_equal((ca[:, None] == cb[None, :]) & known, same & known)
        got = [value_at(values, c) for c in cb[cb >= 0]]
        assert got == [v for v in b if v is not None]
    shared = coded_array(pa.array(list(a), pa.string()))
    ca, cb, values = joint_codes(shared, shared.take(np.arange(5)))
    assert values.to_pylist() == shared.values.to_pylist() and (cb == ca[:5]).all()


def coded(side: EvalSide) -> EvalSide:
    return EvalSide(side.vectors, None if side.labels is None else as_coded(side.labels),
                    as_coded(side.sources))


@pytest.mark.parametrize("overlap", [False, True])
def test_evaluate_coded_sides_equals_object_sides(overlap: bool) -> None:
    """kNN, retrieval, linear probe and geometry from coded labels and sources equal
    those from object arrays: missing labels, a class without references, queries that
    share sources with the references (left out of their neighbours) and ``self_rows``."""
    q, r = eval_side(4, 60, prefix="" if overlap else "q"), eval_side(5, 200, prefix="r")
    ql, rl = q.labels.copy(), r.labels.copy()
    ql[:7] = None
    ql[7] = "only-among-queries"
    rl[::5] = None
    if overlap:  # the queries' sources are the references' first 30 sources
        r = EvalSide(r.vectors, rl, np.concatenate([q.sources, r.sources[60:]]))
    q, r = EvalSide(q.vectors, ql, q.sources), EvalSide(r.vectors, rl, r.sources)
    self_rows = np.where(np.arange(60) % 4 == 0, np.arange(60), -1) if overlap else None
    cfg = EvalConfig(knn_ks=(5, 20), recall_ks=(1, 4), probe_max_train=120)
    want = evaluate(q, r, cfg, self_rows=self_rows)
    for qs, rs in [(coded(q), coded(r)), (q, coded(r)), (coded(q), r)]:
        got = evaluate(qs, rs, cfg, self_rows=self_rows)
        assert got.metrics == want.metrics
        assert got.notes == want.notes
    assert any("only-among-queries" in n for n in want.notes)


def test_label_status_from_codes() -> None:
    q, r = eval_side(1, 40, prefix="q"), eval_side(2, 80, prefix="r")
    one = EvalSide(r.vectors, np.array(["x"] * 80, dtype=object), r.sources)
    for side in (one, coded(one)):
        rep = evaluate(q, side, EvalConfig())
        assert any("found 1 (x)" in n for n in rep.notes)


@pytest.mark.parametrize("against", [False, True])
def test_sides_on_workers_never_parse_the_item_table(tmp_path, against: bool) -> None:
    """``eval --ray``'s sides: labels and sources as codes read from the item table's
    file (its pandas table never built on the driver), the same split and the same
    values as the local sides."""
    rng = np.random.default_rng(0)
    n = 120
    items = pd.DataFrame({"path": [f"img{i}.png" for i in range(n)],
                          "source": [f"src{i // 2}" for i in range(n)],
                          "view": np.arange(n) % 2,
                          "label": [None if i % 11 == 0 else f"c{i % 3}" for i in range(n)]})
    x = rng.normal(size=(n, 8)).astype(np.float32)
    write_store(tmp_path / "st", x, items)
    test = None
    if against:
        write_store(tmp_path / "test", x[:30], items.iloc[:30].assign(
            source=[f"src{i}" for i in range(30)]))
        test = tmp_path / "test"
    local = load_sides(tmp_path / "st", test, 0.25, seed=3)
    parsed = []
    real = Store.items.fget

    def spy(self):  # noqa: ANN001, ANN202
        parsed.append(self.root)
        return real(self)

    try:
        Store.items = property(spy)  # type: ignore[method-assign]
        dist = load_sides(tmp_path / "st", test, 0.25, seed=3, on_workers=True)
    finally:
        Store.items = property(real)  # type: ignore[method-assign]
    assert parsed == []
    for a, b in [(local.queries, dist.queries), (local.references, dist.references)]:
        assert isinstance(b.labels, Coded) and isinstance(b.sources, Coded)
        assert list(b.labels.objects()) == list(a.labels)
        assert list(b.sources.objects()) == list(a.sources)
        np.testing.assert_array_equal(np.asarray(b.vectors), a.vectors)
    np.testing.assert_array_equal(
        local.self_rows if local.self_rows is not None else [],
        dist.self_rows if dist.self_rows is not None else [])
    for name in ("labels", "sources"):  # numbered as the local sides joined
        q, r = getattr(dist.queries, name), getattr(dist.references, name)
        ca, cb, _ = joint_codes(q, r)
        want_codes = codes_of(np.concatenate([getattr(local.queries, name),
                                              getattr(local.references, name)]))[0]
        np.testing.assert_array_equal(np.concatenate([ca, cb]), want_codes)
        if not against:  # the split's sides come numbered so: kept without a copy
            assert ca is q.codes and cb is r.codes
    cfg = EvalConfig(knn_ks=(3,), recall_ks=(1,), probe_max_train=50)
    want = evaluate(local.queries, local.references, cfg, self_rows=local.self_rows)
    got = evaluate(dist.queries, EvalSide(np.asarray(dist.references.vectors),
                                          dist.references.labels, dist.references.sources),
                   cfg, self_rows=dist.self_rows)
    assert got.metrics == want.metrics


def test_string_column_reads_rows_where_used() -> None:
    from pairkit.core.columns import StringColumn

    col = StringColumn(pa.array(["a/x.jpg", None, "b.png", "c"], type=pa.string()))
    assert len(col) == 4 and col[2] == "b.png" and col[np.int64(1)] is None
    assert list(col[np.array([3, 0])]) == ["c", "a/x.jpg"]
    assert list(col[np.array([True, False, False, True])]) == ["a/x.jpg", "c"]
    assert list(col[:2]) == ["a/x.jpg", None]
    assert np.asarray(col).dtype == object and list(np.asarray(col)) == col[:4].tolist()


def test_integer_codes_renumbered_without_objects() -> None:
    codes, uniques = codes_of(np.array([7, 3, 7, 9, 3], dtype=np.int64))
    np.testing.assert_array_equal(codes, [0, 1, 0, 2, 1])
    assert uniques.dtype.kind == "i" and list(uniques) == [7, 3, 9]


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_units_from_hash_codes_equal_those_from_strings(seed: int) -> None:
    """``dedup --ray``'s file hashes as codes (empty and missing: -1) give the units the
    strings give, numbered alike."""
    from pairkit.core.columns import missing_as_null
    from pairkit.mine.near_duplicates import exact_units

    rng = np.random.default_rng(seed)
    pool = ["h1", "h2", "h3", "", None]
    sha = np.array([pool[i] for i in rng.integers(0, 5, 60)], dtype=object)
    node_item = rng.permutation(60)[:40]
    want = exact_units(node_item, sha)
    hashed = coded_array(missing_as_null(pa.array(list(sha), type=pa.string())))
    np.testing.assert_array_equal(exact_units(node_item, hashed.codes), want)


@pytest.mark.parametrize("seed", [0, 1])
def test_first_of_groups_is_numpy_unique(seed: int) -> None:
    from pairkit.core.columns import first_of_groups

    keys = np.random.default_rng(seed).integers(0, 50, 1000).astype(np.uint64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    got_first, group = first_of_groups(keys)
    np.testing.assert_array_equal(got_first, first)
    np.testing.assert_array_equal(group, inverse.ravel())
    assert [len(a) for a in first_of_groups(keys[:0])] == [0, 0]


def test_hashed_codes_equal_codes_of_and_survive_a_collision(monkeypatch) -> None:
    """Codes from hashes equal ``codes_of``'s (first appearance; nulls -1; empty and
    long strings; arrays read in slices); when two strings share a hash (every hash
    forced equal) the check finds it and the column is dictionary-encoded instead."""
    import pairkit.core.columns as columns

    real = columns.string_hashes
    rng = np.random.default_rng(4)
    pool = ["", "a", "ab", "ba", "é", "s1.jpg", "x" * 300, None] + [f"s{i}" for i in range(300)]
    values = [pool[i] for i in rng.integers(0, len(pool), 3000)]
    arr = pa.array(values, type=pa.string())

    def batches():
        return (arr.slice(s, 700) for s in range(0, len(arr), 700))

    want, uniques = codes_of(np.array(values, dtype=object))
    for n in (None, len(arr)):
        got = columns.hashed_codes(batches, n)
        np.testing.assert_array_equal(got.codes, want)
        assert got.values.to_pylist() == list(uniques)
    nulls = columns.hashed_codes(lambda: iter([pa.array([None] * 5, type=pa.string())]))
    assert list(nulls.codes) == [-1] * 5 and len(nulls.values) == 0
    assert len(columns.hashed_codes(lambda: iter([]), 0).codes) == 0
    monkeypatch.setattr(columns, "string_hashes", lambda a: np.zeros(len(a), np.uint64))
    got = columns.hashed_codes(batches)
    np.testing.assert_array_equal(got.codes, want)
    assert got.values.to_pylist() == list(uniques)
    # a string of the last batch only shares the hash of one first seen in the first batch
    late = values + ["zz"]
    arr2 = pa.array(late, type=pa.string())
    want2, uniques2 = codes_of(np.array(late, dtype=object))

    def colliding(a):
        h = real(a)
        h[np.asarray(a.to_pylist(), dtype=object) == "zz"] = real(pa.array(["a"]))[0]
        return h

    monkeypatch.setattr(columns, "string_hashes", colliding)
    got = columns.hashed_codes(lambda: (arr2.slice(s, 700) for s in range(0, len(arr2), 700)))
    np.testing.assert_array_equal(got.codes, want2)
    assert got.values.to_pylist() == list(uniques2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_joint_codes_of_one_stores_columns_number_as_codes_of(seed: int) -> None:
    """Two subsets of one store's column (a split's queries and references, in any
    order) get the codes ``codes_of`` gives their concatenation: the numbering the
    linear probe's split by source and its classes depend on."""
    rng = np.random.default_rng(seed)
    pool = [f"v{i}" for i in range(40)] + [None]
    whole = np.array([pool[i] for i in rng.integers(0, len(pool), 500)], dtype=object)
    coded = coded_array(pa.array(list(whole), type=pa.string()))
    rows = rng.permutation(500)
    qa, qb = rows[:120], np.sort(rows[120:])
    want, uniques = codes_of(np.concatenate([whole[qa], whole[qb]]))
    ca, cb, values = joint_codes(coded.take(qa), coded.take(qb))
    np.testing.assert_array_equal(np.concatenate([ca, cb]), want)
    assert values.to_pylist() == list(uniques)
    ca, cb, values = joint_codes(whole[qa], coded.take(qb))  # an object side and a coded one
    np.testing.assert_array_equal(np.concatenate([ca, cb]), want)


def test_string_hashes_do_not_depend_on_the_arrow_type_or_slice() -> None:
    from pairkit.core.columns import string_hashes

    arr = pa.array(["x", "yy", "x", "", "é" * 40, "yy"], type=pa.string())
    h = string_hashes(arr)
    assert h[0] == h[2] and h[1] == h[5] and len(set(h.tolist())) == 4
    np.testing.assert_array_equal(string_hashes(arr.cast(pa.large_string())), h)
    np.testing.assert_array_equal(string_hashes(arr.dictionary_encode()), h)
    np.testing.assert_array_equal(string_hashes(arr.slice(2, 3)), h[2:5])
