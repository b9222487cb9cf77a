"""``mine`` with the IVF lists split into partitions (pairkit/mine/ivf_parts.py), run
here (the functions the Ray workers run, one after the other): the table and the stats
equal the parts path's with the whole index; a partition reads only its cells' rows;
the merge of the partitions' top-k is the exact top-k (ties by lowest id)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.core.tables import read_table
from pairkit.index.options import IndexOptions
from pairkit.mine import ivf_parts
from pairkit.mine.config import MineConfig
from pairkit.mine.parts_run import mine_parts
from tests.mine.test_streamed import make_store

CPU = {"device": "cpu", "backend": "faiss"}


@pytest.fixture(scope="module")
def store16(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("lists") / "st", "float16")


def run(store, tmp_path, cfg, index, fmt="triplet", partitions=None, name="out", **rules):
    """``mine_parts`` here into ``NAME.parquet``; ``rules``: its ``fn_config`` and
    ``positives``."""
    out = tmp_path / f"{name}.parquet"
    stats = mine_parts(store.root, None, cfg, index, fmt, str(out), False, None,
                       partitions=partitions, **rules)
    return read_table(out), stats


def same(a, sa, b, sb):
    pd.testing.assert_frame_equal(a, b)
    skip = {"seconds", "index"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}


@pytest.mark.parametrize("case", ["p1", "p2", "p3", "p5-nprobe1", "p8-nprobe8",
                                  "n-tuple", "labeled-pair", "retries", "short", "k",
                                  "uneven-blocks"])
def test_split_lists_equal_the_whole_index(store16, tmp_path, case):
    cfg, fmt, nprobe, parts = MineConfig(batch_size=300), "triplet", 2, 2
    if case.startswith("p"):
        parts = int(case[1])
        nprobe = {"p5-nprobe1": 1, "p8-nprobe8": 8}.get(case, 3)
    elif case in ("n-tuple", "labeled-pair"):
        fmt, parts = case, 3
    elif case == "retries":  # the best candidates filtered out: deeper searches
        cfg, parts = MineConfig(batch_size=300, max_score=0.5), 3
    elif case == "short":  # anchors end short: searched to the store's end
        cfg, fmt = MineConfig(batch_size=300, num_negatives=6, min_score=0.9), "n-tuple"
    elif case == "k":
        cfg, parts = MineConfig(batch_size=300, num_negatives=12, sampling="softmax"), 4
    elif case == "uneven-blocks":
        cfg, parts = MineConfig(batch_size=457, positive="random"), 3
    index = IndexOptions(kind="ivf", nlist=8, nprobe=nprobe, **CPU)
    a, sa = run(store16, tmp_path, cfg, index, fmt, partitions=0, name="whole")
    b, sb = run(store16, tmp_path, cfg, index, fmt, partitions=parts, name="split")
    assert "partitions" not in sa["index"]
    assert f"its lists in {parts} partitions" in sb["index"]
    assert len(a) > 0
    same(a, sa, b, sb)
    if case == "retries":
        assert sa["retries"] > 0 and sa["anchors_retried"] > 0
    if case == "short":
        assert sa["anchors_short"] > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_split_lists_to_a_dataset_folder_leave_only_its_parts(store16, tmp_path):
    """``-o pairs/`` (a dataset folder) with the lists split: the partitions' candidate
    files lie in the parts folder that becomes the dataset, and were committed with it
    (pandas then refused to read it: "Could not read schema from .../cand-00000-00000.npz");
    now the folder holds the parts only, and reads as the table written whole."""
    cfg = MineConfig(batch_size=500)
    index = IndexOptions(kind="ivf", nlist=8, nprobe=3, **CPU)
    a, _ = run(store16, tmp_path, cfg, index, partitions=0, name="whole")
    out = tmp_path / "pairs"
    mine_parts(store16.root, None, cfg, index, "triplet", f"{out}/", False, None,
               partitions=2)
    assert sorted(p.name for p in out.iterdir()) == [f"part-{i:05d}.parquet"
                                                     for i in range(5)]
    pd.testing.assert_frame_equal(pd.read_parquet(out), a)


def test_auto_ivf_and_float16_keep_the_whole_index(store16, tmp_path):
    """Only a float16 IVF (``HalfIvf``) is split: auto below its row limit (exact), or
    float16 lists (lossy, re-scored) keep the index built whole."""
    assert ivf_parts.lists_spec(2200, 16, IndexOptions(**CPU)) is None
    assert ivf_parts.lists_spec(2200, 16, IndexOptions(kind="ivf", nlist=8, float16=True,
                                                       **CPU)) is None
    assert ivf_parts.lists_spec(2200, 16, IndexOptions(kind="ivf", nlist=40, **CPU)) is None
    spec = ivf_parts.lists_spec(2200, 16, IndexOptions(exact_max_rows=1000, nlist=8, **CPU))
    assert spec is not None and spec.kind == "ivf" and spec.nprobe
    _, sb = run(store16, tmp_path, MineConfig(batch_size=500),
                IndexOptions(kind="ivf", nlist=8, float16=True, **CPU), partitions=3)
    assert "partitions" not in sb["index"]


def test_auto_ivf_split(store16, tmp_path):
    index = IndexOptions(exact_max_rows=1000, nlist=8, **CPU)  # auto: ivf above 1,000 rows
    cfg = MineConfig(batch_size=700)
    a, sa = run(store16, tmp_path, cfg, index, partitions=0, name="whole")
    b, sb = run(store16, tmp_path, cfg, index, partitions=3, name="split")
    assert "auto" in sb["index"] and "in 3 partitions" in sb["index"]
    same(a, sa, b, sb)


def test_split_cells_balanced_and_covering():
    offsets = np.r_[0, np.cumsum([100, 0, 0, 300, 50, 50, 400, 100])]
    for p in range(1, 10):
        parts = ivf_parts.split_cells(offsets, p)
        assert len(parts) == min(p, 8)
        assert parts[0][0] == 0 and parts[-1][1] == 8
        assert all(c0 < c1 for c0, c1 in parts)
        assert all(parts[i][1] == parts[i + 1][0] for i in range(len(parts) - 1))
    rows = [int(offsets[c1] - offsets[c0]) for c0, c1 in ivf_parts.split_cells(offsets, 2)]
    assert rows == [500, 500]


class Guarded:
    """Rows that refuse (and count) reads outside ``allowed``."""

    def __init__(self, rows, allowed):
        self.rows, self.allowed, self.read = rows, set(int(i) for i in allowed), 0
        self.shape, self.dtype = rows.shape, rows.dtype

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, ids):
        ids = np.asarray(ids)
        bad = set(ids.tolist()) - self.allowed
        assert not bad, f"read rows outside the partition: {sorted(bad)[:5]}"
        self.read += len(ids)
        return self.rows[ids]


def lists_of(store, nlist=8, nprobe=2, parts=3):
    spec = IndexOptions(kind="ivf", nlist=nlist, nprobe=nprobe, **CPU).resolved(store.count,
                                                                               store.dim)
    return ivf_parts.plan_lists(store.rows(), spec, parts), spec


@pytest.mark.parametrize("read_bytes", [None, 100], ids=["one-read", "3-rows-a-read"])
def test_partition_reads_only_its_cells_rows(store16, monkeypatch, read_bytes):
    """A partition's index is made of its cells' rows only (other reads refused; each
    row read once, also a few rows at a time), and its search is the whole index's
    restricted to those cells."""
    from pairkit.index.faiss_build import build_index
    from pairkit.index.half_ivf import HalfIvf
    from pairkit.index.search import knn_search

    if read_bytes:
        monkeypatch.setattr(ivf_parts, "READ_BYTES", read_bytes)

    lists, spec = lists_of(store16)
    whole = build_index(store16.rows(), spec)
    assert isinstance(whole, HalfIvf)
    np.testing.assert_array_equal(whole.offsets, lists.offsets)
    np.testing.assert_array_equal(whole.ids, lists.ids)
    q = store16.vectors(np.float32)[::7]
    k = 25
    ws, wi = knn_search(q, whole, k)
    partials = []
    for p, (c0, c1) in enumerate(lists.parts):
        mine = lists.ids[lists.offsets[c0]:lists.offsets[c1]]
        guarded = Guarded(store16.rows(), mine)
        index = ivf_parts.partition_index(guarded, lists, np.arange(c0, c1))
        assert guarded.read == len(mine) == lists.part_rows(p) == index.ntotal
        s, i = ivf_parts.partial_search(index, q, k)
        got = i[i >= 0]
        assert np.isin(got, mine).all()
        partials.append((s, i))
    ms, mi = ivf_parts.merge_top(partials, k)
    np.testing.assert_array_equal(mi, wi)
    np.testing.assert_allclose(ms, ws, rtol=1e-6)
    # the deeper search, one partition at a time, each reading only its probed cells
    rs, ri = ivf_parts.search_cells(store16.rows(), lists, q[:5], 60)
    ws, wi = knn_search(q[:5], whole, 60)
    np.testing.assert_array_equal(ri, wi)


def test_search_partition_writes_only_its_anchors(store16, tmp_path, monkeypatch):
    """The worker of a partition reads its cells' rows and the anchors, nothing else; an
    anchor whose probes all land elsewhere gets no row in its file."""
    from pairkit.core.store_rows import StoreRows
    from pairkit.mine.block_parts import PartsJob, PartsPlan
    from pairkit.mine.blocks import MineBlocks

    lists, _ = lists_of(store16, nprobe=1, parts=4)
    anchors = np.arange(0, store16.count, 3)
    rows_from = StoreRows.of(store16, streamed=True, pinned=store16)
    cand = ivf_parts.ListCandidates(lists, rows_from, str(tmp_path), anchors, 200, 10)
    blocks = MineBlocks(None, anchors, None, None, None, 10, store16.count, 5, False, None,
                        cand, rows_from)
    job = PartsJob(blocks, PartsPlan(str(tmp_path), "triplet", store16.content_id, False))
    p = 1
    c0, c1 = lists.parts[p]
    allowed = np.r_[lists.ids[lists.offsets[c0]:lists.offsets[c1]], anchors]
    guarded = Guarded(store16.rows(), allowed)
    monkeypatch.setattr(StoreRows, "load", lambda self: guarded)
    done = ivf_parts.search_partition(job, p)
    assert done.rows == lists.part_rows(p)
    assert guarded.read == done.rows + len(anchors)
    probes = lists.quantizer.assign(store16.vectors(np.float32)[anchors], 1).ravel()
    here = (probes >= c0) & (probes < c1)
    assert 0 < done.anchors == here.sum() < len(anchors)
    with np.load(ivf_parts.candidates_path(str(tmp_path), 0, p)) as f:
        np.testing.assert_array_equal(f["rows"], np.flatnonzero(here[:200]))


def test_empty_cells_and_more_partitions_than_rows(tmp_path):
    """Cells left empty by k-means, partitions holding none of an anchor's probes: still
    the whole index's table."""
    from tests.conftest import random_store

    st = random_store(tmp_path / "st", n_sources=1100, views=2, dim=16, classes=3,
                      dtype="float16")  # 3 tight classes, 8 cells: some nearly empty
    index = IndexOptions(kind="ivf", nlist=8, nprobe=1, **CPU)
    lists, _ = lists_of(st, nprobe=1, parts=8)
    assert len(lists.parts) == 8
    cfg = MineConfig(batch_size=600)
    a, sa = run(st, tmp_path, cfg, index, partitions=0, name="whole")
    b, sb = run(st, tmp_path, cfg, index, partitions=8, name="split")
    same(a, sa, b, sb)


def test_merge_top_equals_brute_force_with_ties():
    """Hand-made partials with ties at the cut and across partitions, padding and rows
    with no candidate: the merge is the stable brute-force top-k (score, then id)."""
    s1 = np.array([[0.9, 0.5, 0.5, -np.inf], [0.3, 0.3, 0.3, 0.3], [-np.inf] * 4], np.float32)
    i1 = np.array([[7, 2, 9, -1], [4, 5, 6, 8], [-1] * 4])
    s2 = np.array([[0.5, 0.5, 0.1, -np.inf], [0.3, 0.3, 0.2, 0.1], [-np.inf] * 4], np.float32)
    i2 = np.array([[3, 1, 11, -1], [1, 2, 0, 3], [-1] * 4])
    s3 = np.array([[0.9], [0.4], [-np.inf]], np.float32)
    i3 = np.array([[8], [10], [-1]])
    k = 4
    ms, mi = ivf_parts.merge_top([(s1, i1), (s2, i2), (s3, i3)], k)
    for r in range(3):
        pairs = [(-float(s), int(i)) for s, i in zip(np.r_[s1[r], s2[r], s3[r]],
                                                     np.r_[i1[r], i2[r], i3[r]], strict=True)
                 if i >= 0]
        want = sorted(pairs)[:k]
        want_i = [i for _, i in want] + [-1] * (k - len(want))
        want_s = [-s for s, _ in want] + [-np.inf] * (k - len(want))
        assert mi[r].tolist() == want_i
        np.testing.assert_array_equal(ms[r], np.array(want_s, np.float32))
    assert mi[0].tolist() == [7, 8, 1, 2]
    assert mi[1].tolist() == [10, 1, 2, 4]
    assert mi[2].tolist() == [-1] * 4


def test_split_plan_made_in_a_child_process(store16, tmp_path, monkeypatch):
    """Above PLAN_APART_ROWS the plan (with the cells' row ids) is made in a spawned
    child: the same table and stats."""
    import pairkit.mine.parts_run as parts_run

    cfg = MineConfig(batch_size=700)
    index = IndexOptions(kind="ivf", nlist=8, nprobe=3, **CPU)
    a, sa = run(store16, tmp_path, cfg, index, partitions=0, name="whole")
    monkeypatch.setattr(parts_run, "PLAN_APART_ROWS", 1000)
    b, sb = run(store16, tmp_path, cfg, index, partitions=3, name="split")
    assert "in 3 partitions" in sb["index"]
    same(a, sa, b, sb)


def test_blocks_read_by_ranges_when_their_rows_lie_together():
    """The blocks of a split run read by byte ranges when their anchors' and positives'
    rows fall in at most twice the store's blocks (hand-counted), not when the positives
    are scattered over the store."""
    from pairkit.mine.ivf_parts import blocks_read_by_ranges

    n, row_bytes, block = 1000, 100, 1000  # 10 rows a block: 100 blocks
    anchors = np.arange(n)
    offsets = np.arange(n + 1)
    beside = anchors ^ 1  # the other view of a source, next to it
    assert blocks_read_by_ranges(anchors, offsets, beside, 100, n, row_bytes, block)
    # 10 blocks of anchors, each with positives in every block of the store: 10 x 100
    scattered = (anchors * 37) % n
    assert not blocks_read_by_ranges(anchors, offsets, scattered, 100, n, row_bytes, block)
    # the limit: each block of 100 anchors touches its 10 blocks plus 10 of another
    # block of anchors (20 x 10 = 200 = 2 x 100 blocks: yes); one more block: no
    other = (anchors + 100) % n
    assert blocks_read_by_ranges(anchors, offsets, other, 100, n, row_bytes, block)
    one_more = other.copy()
    one_more[0] = 555
    assert not blocks_read_by_ranges(anchors, offsets, one_more, 100, n, row_bytes, block)
