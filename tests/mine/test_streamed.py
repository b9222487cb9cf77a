"""Local ``mine`` to a parquet output streamed from the store's shards (the parts path of
pairkit/mine/parts_run.py run in this process, the rows read in place, the index built
from them block by block): the table and the stats equal the in-memory run's; no float32
copy of the store is made; a failure leaves no output and no temp folder; the runs that
can't stream (other outputs, hnsw) keep the in-memory path; with false-negative rules or
mined positives the blocks write the table part by part, equal to the in-memory run's."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pairkit.core.store import Store
from pairkit.core.store_writer import write_store
from pairkit.core.tables import read_table
from pairkit.errors import PairkitError, StoreError
from pairkit.index import faiss_build, half_ivf
from pairkit.index.options import IndexOptions
from pairkit.mine.command import mine_to_files
from pairkit.mine.config import MineConfig
from pairkit.mine.parts_run import STREAMED


def make_store(path, dtype: str, n_sources: int = 1100, shard_rows: int = 500):
    """Clustered rows, two views per source, labels by class, in several shards."""
    rng = np.random.default_rng(5)
    centers = rng.normal(size=(5, 16))
    base = centers[np.arange(n_sources) % 5] + 0.5 * rng.normal(size=(n_sources, 16))
    x = np.repeat(base, 2, axis=0) + 0.1 * rng.normal(size=(2 * n_sources, 16))
    sources = np.repeat(np.arange(n_sources), 2)
    items = pd.DataFrame({"path": [f"c{s % 5}/s{s}.jpg" for s in sources],
                          "view": np.tile([0, 1], n_sources),
                          "label": [f"c{s % 5}" for s in sources]})
    items["source"] = items["path"]
    return write_store(path, x.astype(np.float32), items, dtype=dtype, shard_rows=shard_rows)


@pytest.fixture(scope="module")
def store16(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("s16") / "st", "float16")


@pytest.fixture(scope="module")
def store32(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("s32") / "st", "float32", n_sources=300,
                      shard_rows=170)


@pytest.fixture
def small_blocks(monkeypatch):
    """Index blocks of 256 rows, so that building crosses the shards' borders."""
    monkeypatch.setattr(faiss_build, "ADD_BLOCK_ROWS", 256)
    monkeypatch.setattr(half_ivf, "ASSIGN_BLOCK_ROWS", 256)


def both(store, tmp_path, cfg, out="pairs.parquet", fmt="triplet", index=None, relation=None):
    """(in-memory table, its stats, streamed table, its stats)."""
    index = index or IndexOptions(kind="ivf", nlist=8, device="cpu", backend="faiss")
    suffix = "/" if out.endswith("/") else ""
    a, b = tmp_path / f"a-{out.rstrip('/')}", tmp_path / f"b-{out.rstrip('/')}"
    sa = mine_to_files(store.root, str(a) + suffix, cfg, fmt=fmt, index=index,
                       relation=relation, streamed=False)
    sb = mine_to_files(store.root, str(b) + suffix, cfg, fmt=fmt, index=index,
                       relation=relation)
    assert STREAMED not in sa["index"]
    return read_table(a), sa, read_table(b), sb


def same_stats(sa, sb):
    skip = {"seconds", "index"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}
    if sa["hard"]:
        assert sb["index"] == sa["index"].replace("built now", STREAMED)


@pytest.mark.parametrize("case", ["ivf", "ivf-short-lists", "flat", "ivf-float16", "ivfpq",
                                  "n-tuple", "labeled-pair", "easy", "short", "label",
                                  "random-positive"])
def test_streamed_equals_in_memory(store16, tmp_path, small_blocks, case):
    cfg, fmt, index, relation = MineConfig(batch_size=300), "triplet", None, None
    cpu = {"device": "cpu", "backend": "faiss"}
    if case == "ivf-short-lists":  # 2,200 rows < 256 x 40 cells: an IndexIVFFlat
        index = IndexOptions(kind="ivf", nlist=40, **cpu)
    elif case == "flat":
        index = IndexOptions(kind="flat", **cpu)
    elif case == "ivf-float16":  # a lossy index: candidates re-scored from the shards
        index = IndexOptions(kind="ivf", nlist=8, float16=True, **cpu)
    elif case == "ivfpq":
        index = IndexOptions(kind="ivfpq", nlist=8, **cpu)
    elif case in ("n-tuple", "labeled-pair"):
        fmt = case
    elif case == "easy":
        cfg = MineConfig(hard=False, batch_size=300, num_negatives=3)
    elif case == "short":
        cfg, fmt = MineConfig(batch_size=300, num_negatives=6, min_score=0.9), "n-tuple"
    elif case == "label":
        cfg, relation = MineConfig(batch_size=300, max_positives=3), "label"
    elif case == "random-positive":
        cfg = MineConfig(batch_size=250, positive="random", sampling="softmax")
    a, sa, b, sb = both(store16, tmp_path, cfg, fmt=fmt, index=index, relation=relation)
    if case == "short":
        assert sa["anchors_short"] > 0
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b)
    same_stats(sa, sb)
    assert sb["negatives_same_label"] is not None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


@pytest.mark.parametrize("relation", [None, "label"])
def test_plan_made_in_a_child_process_is_the_same(store16, tmp_path, monkeypatch, relation):
    """Above PLAN_APART_ROWS the plan is made in a spawned child from the snapshot's item
    table (its memory goes with the child): same table and stats."""
    import pairkit.mine.parts_run as parts_run

    seen = []
    real = parts_run.plan_here

    def spy(store, spec, *rest):
        seen.append(store.count > parts_run.PLAN_APART_ROWS)
        return real(store, spec, *rest)

    monkeypatch.setattr(parts_run, "PLAN_APART_ROWS", 1000)
    monkeypatch.setattr(parts_run, "plan_here", spy)
    a, sa, b, sb = both(store16, tmp_path, MineConfig(batch_size=700, max_positives=4),
                        relation=relation)
    assert seen == [True]
    pd.testing.assert_frame_equal(a, b)
    same_stats(sa, sb)


def test_streamed_float32_store_and_dataset_output(store32, tmp_path):
    a, sa, b, sb = both(store32, tmp_path, MineConfig(batch_size=100), out="pairs/")
    names = sorted(p.name for p in (tmp_path / "b-pairs").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "a-pairs").iterdir()) == [
        f"part-0000{i}.parquet" for i in range(6)]  # 600 anchors, 100 per block
    pd.testing.assert_frame_equal(a, b)
    same_stats(sa, sb)


def test_streamed_run_makes_no_float32_copy(store16, tmp_path, monkeypatch):
    """The streamed run never calls Store.vectors (the copy of the whole store)."""
    def refuse(self, dtype=np.float32):
        raise AssertionError("Store.vectors called")

    monkeypatch.setattr(Store, "vectors", refuse)
    stats = mine_to_files(store16.root, str(tmp_path / "p.parquet"), MineConfig(batch_size=500),
                          index=IndexOptions(kind="ivf", nlist=8, device="cpu", backend="faiss"))
    assert STREAMED in stats["index"] and stats["rows"] == 5 * 2200
    with pytest.raises(AssertionError, match="Store.vectors"):  # the in-memory path does
        mine_to_files(store16.root, str(tmp_path / "q.parquet"), MineConfig(batch_size=500),
                      streamed=False)


def test_failure_mid_run_leaves_no_output_and_no_temp_folder(store16, tmp_path, monkeypatch):
    import pairkit.core.pairs as pairs

    real = pairs.build_pair_table
    calls = []

    def fail_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise PairkitError("boom")
        return real(*a, **k)

    monkeypatch.setattr(pairs, "build_pair_table", fail_third)
    out = tmp_path / "out" / "pairs.parquet"
    with pytest.raises(PairkitError, match="boom"):
        mine_to_files(store16.root, str(out), MineConfig(batch_size=500),
                      stats_path=tmp_path / "out" / "stats.json")
    assert list((tmp_path / "out").iterdir()) == []  # no output, no stats, no parts folder
    monkeypatch.setattr(pairs, "build_pair_table", real)
    stats = mine_to_files(store16.root, str(out), MineConfig(batch_size=500))
    assert len(read_table(out)) == stats["rows"] > 0


@pytest.mark.parametrize("where", ["pairkit.mine.ivf_parts.lists_spec",
                                   "pairkit.mine.parts_run.PlanSpec"])
def test_ctrl_c_as_the_run_starts_leaves_no_parts_folder(store16, tmp_path, monkeypatch, where):
    """Ctrl-C just after the parts folder is named (before the blocks' plan, and as it
    starts) leaves nothing beside the output (failed before: the folder was made before
    the run's try, and a SIGINT as `mine` opened the store left `.pairs.parquet.X.tmp`,
    seen once in tests/cli/test_interrupt.py)."""
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, interrupted)
    out = tmp_path / "out" / "pairs.parquet"
    with pytest.raises(KeyboardInterrupt):
        mine_to_files(store16.root, str(out), MineConfig(batch_size=500))
    assert list((tmp_path / "out").iterdir()) == []


def test_damaged_shard_refused_in_one_line_nothing_written(tmp_path):
    st = make_store(tmp_path / "st", "float16", n_sources=200, shard_rows=150)
    shard = tmp_path / "st" / st.shards[1].file
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF
    shard.write_bytes(bytes(data))
    out = tmp_path / "o" / "pairs.parquet"
    out.parent.mkdir()
    with pytest.raises(StoreError, match="checksum mismatch"):
        mine_to_files(st.root, str(out), MineConfig(batch_size=100))
    assert list(out.parent.iterdir()) == []


def test_existing_output_refused_then_replaced_with_force(store16, tmp_path):
    out = tmp_path / "pairs.parquet"
    out.write_bytes(b"old")
    with pytest.raises(PairkitError, match="exists"):
        mine_to_files(store16.root, str(out), MineConfig(batch_size=500))
    assert out.read_bytes() == b"old"
    mine_to_files(store16.root, str(out), MineConfig(batch_size=500), force=True,
                  stats_path=tmp_path / "stats.json")
    assert len(read_table(out)) == json.loads((tmp_path / "stats.json").read_text())["rows"]


@pytest.mark.parametrize("case", ["csv", "stdout", "hnsw"])
def test_runs_that_cannot_stream_stay_in_memory(store32, tmp_path, capsys, case):
    out, kw = str(tmp_path / "p.parquet"), {}
    if case == "csv":
        out = str(tmp_path / "p.csv")
    elif case == "stdout":
        out = "-"
    elif case == "hnsw":
        kw["index"] = IndexOptions(kind="hnsw", device="cpu", backend="faiss")
    stats = mine_to_files(store32.root, out, MineConfig(batch_size=100), **kw)
    assert STREAMED not in stats["index"] and stats["rows"] > 0


@pytest.mark.parametrize("case", ["margin", "default-rules", "mined-positives", "keep-flags",
                                  "n-tuple-dataset", "label-rule", "hnsw",
                                  "cosine-positives", "ivf-float16"])
def test_rules_and_mined_positives_written_block_by_block_equal_in_memory(
        store32, tmp_path, monkeypatch, request, case):
    """With false-negative rules or mined positives a local parquet output is written by
    the blocks, part by part (the plan holds the vectors, the context and the index, as
    the in-memory run does; the table is never whole here): the same table and stats."""
    import pairkit.mine.command as command
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.positives import PositiveConfig

    default = ("near-duplicate", "mutual-neighbour", "cluster")
    cfg, fmt, out, kw = MineConfig(batch_size=90), "triplet", "pairs.parquet", {}
    index = IndexOptions(kind="flat", device="cpu", backend="faiss")
    if case == "margin":
        kw["fn_config"] = FalseNegativeConfig(rules=("margin",))
    elif case == "default-rules":
        kw = {"fn_config": FalseNegativeConfig(rules=default), "positives": PositiveConfig()}
    elif case == "mined-positives":
        kw["positives"] = PositiveConfig(per_anchor=2)
    elif case == "keep-flags":
        cfg = MineConfig(batch_size=90, fn_mode="keep")
        kw = {"fn_config": FalseNegativeConfig(rules=default), "positives": PositiveConfig()}
    elif case == "n-tuple-dataset":
        fmt, out = "n-tuple", "pairs/"
        kw = {"fn_config": FalseNegativeConfig(rules=default), "positives": PositiveConfig()}
    elif case == "label-rule":  # the search skips the anchor's label
        kw["fn_config"] = FalseNegativeConfig(rules=("label", "near-duplicate"))
    elif case == "ivf-float16":  # the plan holds the float16 rows, read as float32 when used
        store32 = request.getfixturevalue("store16")
        index = IndexOptions(kind="ivf", nlist=8, nprobe=3, device="cpu", backend="faiss")
        kw = {"fn_config": FalseNegativeConfig(rules=default), "positives": PositiveConfig()}
    elif case == "cosine-positives":  # mined by plain cosine, in the cluster rule's PCA
        kw = {"fn_config": FalseNegativeConfig(rules=default),
              "positives": PositiveConfig(whitening=0.0)}
    elif case == "hnsw":  # the plan's index is built from its vectors: any kind
        index = IndexOptions(kind="hnsw", device="cpu", backend="faiss")
        kw["fn_config"] = FalseNegativeConfig(rules=("margin",))
    in_memory = []
    real = command.mine_store
    monkeypatch.setattr(command, "mine_store",
                        lambda *a, **k: in_memory.append(1) or real(*a, **k))
    suffix = "/" if out.endswith("/") else ""
    a, b = tmp_path / f"a-{out.rstrip('/')}", tmp_path / f"b-{out.rstrip('/')}"
    sa = mine_to_files(store32.root, str(a) + suffix, cfg, fmt=fmt, index=index,
                       streamed=False, **kw)
    assert in_memory == [1]
    import pairkit.mine.block_parts as block_parts

    jobs = []
    real_block = block_parts.mine_block_part
    monkeypatch.setattr(block_parts, "mine_block_part",
                        lambda job, span: jobs.append(job) or real_block(job, span))
    sb = mine_to_files(store32.root, str(b) + suffix, cfg, fmt=fmt, index=index, **kw)
    assert in_memory == [1]  # not mined in memory: by the blocks' parts
    fn_filter = jobs[0].blocks.ctx.fn_filter
    from pairkit.core.row_view import is_view

    assert is_view(jobs[0].blocks.ctx.vectors) == (case == "ivf-float16")
    if case == "ivf-float16":  # read in place from the shards: no copy of the store's rows
        from pairkit.core.shard_rows import ShardRows

        assert isinstance(jobs[0].blocks.ctx.vectors.base(), ShardRows)
    if "cluster" in getattr(kw.get("fn_config"), "rules", ()):
        # the cluster rule's principal components of every row are not kept for the blocks
        assert fn_filter.ctx.spectral.reduced.size == 0
        assert fn_filter.ctx.cluster_assign.shape[1] == store32.count
    if fn_filter is not None:
        # nor the whitened neighbour lists: the mutual-neighbour rule's blocks read its
        # source pairs, made from them by the plan
        assert fn_filter.ctx.whitened_neighbours is None
        rules = kw["fn_config"].rules
        assert (fn_filter.ctx.mutual_source_keys is not None) == ("mutual-neighbour" in rules)
    ta, tb = read_table(a), read_table(b)
    assert len(ta) > 0
    pd.testing.assert_frame_equal(ta, tb)
    skip = {"seconds"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}
    if "positives" in kw:
        assert (ta["positive_kind"] == "mined").any()
    if case == "keep-flags":
        assert ta["false_negative"].any()
    if out.endswith("/"):
        assert len(list(b.glob("*.parquet"))) > 1  # one part per block
        # and nothing else: the blocks' mined-positive files stay out of the dataset
        assert all(p.name.startswith("part-") for p in b.iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left



class PickledWorkers:
    """A :class:`pairkit.mine.command.MineExecutor` whose "workers" are this process: what
    each block gets is pickled and unpickled, as Ray ships it, every block a fresh worker
    (nothing loaded kept), and the workers read the store themselves (its ``map_blocks``
    says ``workers_read_store``, as on a Ray cluster)."""

    def search_options(self, index):
        return index

    def __call__(self, run):
        return run(self.map_blocks)

    def map_blocks(self, fn, shared, spans):
        import pickle

        from pairkit.core.store_rows import forget_loaded

        for span in spans:
            forget_loaded()
            yield fn(pickle.loads(pickle.dumps(shared)), span)

    map_blocks.workers_read_store = True  # type: ignore[attr-defined]


def test_cluster_workers_read_the_shards_in_place(store16, tmp_path, small_blocks,
                                                  monkeypatch):
    """On a cluster (workers reading the store) the parts path's workers take the rows in
    place as the local streamed run does, never the float32 copy: the same table and stats
    as in memory, each worker's IVF index a HalfIvf of float16 lists (with the lists kept
    whole, ``partitions=0``; by default they are split: pairkit/mine/ivf_parts.py)."""
    from pairkit.mine.blocks import StoreSearcher

    def refuse(self, dtype=np.float32):
        raise AssertionError("Store.vectors called")

    built = []
    search = StoreSearcher.__call__

    def record(self, queries, k):
        out = search(self, queries, k)
        built.append(type(self.opened.index).__name__)
        return out

    index = IndexOptions(kind="ivf", nlist=8, device="cpu", backend="faiss")
    cfg = MineConfig(batch_size=500)
    sa = mine_to_files(store16.root, str(tmp_path / "a.parquet"), cfg, index=index,
                       streamed=False)
    monkeypatch.setattr(Store, "vectors", refuse)
    monkeypatch.setattr(StoreSearcher, "__call__", record)
    sb = mine_to_files(store16.root, str(tmp_path / "b.parquet"), cfg, index=index,
                       executor=PickledWorkers(), partitions=0)
    pd.testing.assert_frame_equal(read_table(tmp_path / "a.parquet"),
                                  read_table(tmp_path / "b.parquet"))
    assert sb["index"] == sa["index"].replace("built now", "built on each worker")
    skip = {"seconds", "index"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}
    assert len(built) == 5 and set(built) == {"HalfIvf"}  # 5 blocks, 5 fresh workers
    # by default the lists are split: 2 partitions (no worker count), no index built whole
    sc = mine_to_files(store16.root, str(tmp_path / "c.parquet"), cfg, index=index,
                       executor=PickledWorkers())
    pd.testing.assert_frame_equal(read_table(tmp_path / "a.parquet"),
                                  read_table(tmp_path / "c.parquet"))
    assert "built on the workers, its lists in 2 partitions" in sc["index"]
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sc.items() if k not in skip}
    assert len(built) == 5


def test_cluster_plan_with_rules_ships_no_rows(store16, tmp_path, small_blocks):
    """A cluster's plan with the rules and mined positives (float16 store, IVF): its
    vectors are the store's shards read in place and its IVF lists their ids, so what the
    workers receive names the store instead of carrying its rows (each worker reads
    them), and the table and stats are the in-memory run's."""
    import pickle

    from pairkit.core.row_view import RowView
    from pairkit.index.half_ivf import CellRows
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.positives import PositiveConfig

    shipped = []

    class Workers(PickledWorkers):
        def map_blocks(self, fn, shared, spans):
            shipped.append(pickle.loads(pickle.dumps(shared)))
            yield from super().map_blocks(fn, shared, spans)

        map_blocks.workers_read_store = True  # type: ignore[attr-defined]

    index = IndexOptions(kind="ivf", nlist=8, nprobe=3, device="cpu", backend="faiss")
    kw = {"fn_config": FalseNegativeConfig(rules=("near-duplicate", "mutual-neighbour",
                                                  "cluster")),
          "positives": PositiveConfig()}
    cfg = MineConfig(batch_size=500)
    sa = mine_to_files(store16.root, str(tmp_path / "a.parquet"), cfg, index=index,
                       streamed=False, **kw)
    sb = mine_to_files(store16.root, str(tmp_path / "b.parquet"), cfg, index=index,
                       executor=Workers(), **kw)
    ta, tb = read_table(tmp_path / "a.parquet"), read_table(tmp_path / "b.parquet")
    assert (ta["positive_kind"] == "mined").any()
    pd.testing.assert_frame_equal(ta, tb)
    skip = {"seconds", "index"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}
    # first the rules' whitened lists, searched by the workers (pairkit/mine/white_parts.py):
    # their plan names the store too
    from pairkit.mine.white_parts import WhiteLists

    white, job = shipped[0], shipped[1]
    assert isinstance(white, WhiteLists) and white.rows_from.store == str(store16.root)
    vectors = job.blocks.ctx.vectors
    assert isinstance(vectors, RowView) and vectors.rows is None  # read by the worker
    assert vectors.source.store == str(store16.root) and vectors.source.streamed
    assert job.blocks.ctx.fn_filter.ctx.vectors is vectors  # one object, not a copy
    # the masked search's IVF lists keep the rows' ids, read through the same view when
    # a cell is scanned: no copy of the store's float16 rows either
    lists = job.blocks.anchor_searcher.inner.lists
    assert isinstance(lists.codes, CellRows) and lists.codes.view is vectors


def test_cluster_workers_stream_an_s3_store(s3, tmp_path, small_blocks):
    """A store on S3, the table to a local parquet: the workers read the shards from the
    bucket (checksums verified) and build the same float16 lists; the table is the one
    of the same store on disk, mined in memory."""
    rng = np.random.default_rng(2)
    x = np.repeat(rng.normal(size=(400, 16)), 2, axis=0) + 0.1 * rng.normal(size=(800, 16))
    items = pd.DataFrame({"path": [f"s{i // 2}.jpg" for i in range(800)],
                          "view": np.tile([0, 1], 400)})
    items["source"] = items["path"]
    local = write_store(tmp_path / "st", x.astype(np.float32), items, dtype="float16",
                        shard_rows=300)
    write_store(f"{s3}/st", x.astype(np.float32), items, dtype="float16", shard_rows=300)
    index = IndexOptions(kind="ivf", nlist=3, device="cpu", backend="faiss")
    cfg = MineConfig(batch_size=300)
    sa = mine_to_files(local.root, str(tmp_path / "a.parquet"), cfg, index=index,
                       streamed=False)
    sb = mine_to_files(f"{s3}/st", str(tmp_path / "b.parquet"), cfg, index=index,
                       executor=PickledWorkers())
    pd.testing.assert_frame_equal(read_table(tmp_path / "a.parquet"),
                                  read_table(tmp_path / "b.parquet"))
    # each worker reads its partition's cells from the bucket (pairkit/mine/ivf_parts.py)
    assert "its lists in 2 partitions" in sb["index"] and sb["rows"] == sa["rows"] == 5 * 800
    # with the default rules and mined positives: planned from the S3 store's vectors
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.positives import PositiveConfig

    kw = {"index": index, "fn_config": FalseNegativeConfig(), "positives": PositiveConfig()}
    sa = mine_to_files(local.root, str(tmp_path / "c.parquet"), cfg, **kw)
    sb = mine_to_files(f"{s3}/st", str(tmp_path / "d.parquet"), cfg, executor=PickledWorkers(),
                       **kw)
    c, d = read_table(tmp_path / "c.parquet"), read_table(tmp_path / "d.parquet")
    assert (c["positive_kind"] == "mined").any()
    pd.testing.assert_frame_equal(c, d)
    assert sa["fn_estimate"] == sb["fn_estimate"] and sa["clusters"] == sb["clusters"]


@pytest.mark.parametrize("rules", [("community",), ("margin",), ("near-duplicate",),
                                   ("label", "near-duplicate"), ("mutual-neighbour",),
                                   ("cluster",)])
def test_every_rule_over_the_plans_float16_rows_equals_in_memory(store16, tmp_path, rules):
    """A float16 store searched by IVF: the plan holds the float16 rows and reads them as
    float32 when used; every rule gives the in-memory run's table (float32 rows)."""
    from pairkit.mine.false_negatives import FalseNegativeConfig

    index = IndexOptions(kind="ivf", nlist=8, nprobe=3, device="cpu", backend="faiss")
    cfg = MineConfig(batch_size=300)
    kw = {"fn_config": FalseNegativeConfig(rules=rules)}
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    sa = mine_to_files(store16.root, str(a), cfg, index=index, streamed=False, **kw)
    sb = mine_to_files(store16.root, str(b), cfg, index=index, **kw)
    pd.testing.assert_frame_equal(read_table(a), read_table(b))
    skip = {"seconds"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}
