"""``mine`` with the blocks writing their parts of the table (pairkit/mine/parts_run.py,
the path of ``mine --ray`` to a parquet output), run here by an executor whose blocks read
the store themselves as a cluster's workers do: the table and the stats are the local
run's; a block that fails leaves no output and nothing behind, and a rerun works; a block
mined twice (its worker died after writing its part) is counted once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pairkit.core.blocks_here import map_here
from pairkit.core.tables import read_table
from pairkit.errors import PairkitError
from pairkit.index.options import IndexOptions
from pairkit.mine.block_parts import SummaryCounts, summarize
from pairkit.mine.command import mine_to_files
from pairkit.mine.config import MineConfig
from pairkit.mine.stats import QUANTILES, same_label_counts, same_label_share, summary_stats
from pairkit.mine.stream_quantiles import StreamQuantiles
from tests.conftest import random_store


class Here:
    """An executor that runs the blocks in this process, reading the store as a Ray
    worker does (``workers_read_store``); ``blocks(fn, shared, spans)`` may be replaced."""

    def __init__(self, blocks=None) -> None:
        self.blocks = blocks or map_here
        self.calls = 0

    def search_options(self, index: IndexOptions) -> IndexOptions:
        return index

    def __call__(self, run):
        def map_blocks(fn, shared, spans):
            self.calls += 1
            self.fn = fn
            return self.blocks(fn, shared, spans)

        map_blocks.workers_read_store = True
        return run(map_blocks)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return random_store(tmp_path_factory.mktemp("parts") / "store", n_sources=90, views=2,
                        dim=16, classes=5)


def both(store, tmp_path: Path, cfg: MineConfig, out: str, fmt: str = "triplet",
         index: IndexOptions | None = None, executor=None):
    """(local table, its stats, streamed table, its stats) of one configuration."""
    index = index or IndexOptions(kind="auto", device="cpu", backend="faiss", nlist=8)
    a_out, b_out = tmp_path / f"a-{out}", tmp_path / f"b-{out}"
    sa = mine_to_files(store.root, str(a_out) + ("/" if out.endswith("/") else ""), cfg,
                       fmt=fmt, index=index, streamed=False)
    ex = executor or Here()
    sb = mine_to_files(store.root, str(b_out) + ("/" if out.endswith("/") else ""), cfg,
                       fmt=fmt, index=index, executor=ex)
    from pairkit.mine.block_parts import mine_block_part

    assert ex.fn is mine_block_part  # the blocks wrote the parts
    return read_table(a_out), sa, read_table(b_out), sb, a_out, b_out


def same_stats(sa: dict, sb: dict) -> None:
    skip = {"seconds", "index"}
    assert {k: v for k, v in sa.items() if k not in skip} == \
        {k: v for k, v in sb.items() if k not in skip}
    assert sb["index"] == sa["index"].replace("built now", "built on each worker")


@pytest.mark.parametrize("case", ["triplet", "n-tuple", "labeled-pair", "ivf", "ivf-seed", "easy",
                                  "short", "empty-blocks", "random-positive"])
def test_parts_equal_local(store, tmp_path, case):
    cfg, fmt, index = MineConfig(batch_size=40), "triplet", None
    if case in ("n-tuple", "labeled-pair"):
        fmt = case
    elif case == "ivf":
        index = IndexOptions(kind="ivf", device="cpu", backend="faiss", nlist=8)
    elif case == "ivf-seed":  # one list probed: the k-means seed (--seed) shapes the table
        cfg = MineConfig(batch_size=40, seed=3)  # (mutation audit 4a, PR1)
        index = IndexOptions(kind="ivf", device="cpu", backend="faiss", nlist=8, nprobe=1)
    elif case == "easy":
        cfg = MineConfig(hard=False, batch_size=40, num_negatives=3)
    elif case == "short":  # anchors with few or no negatives: columns all null in a block
        cfg, fmt = MineConfig(batch_size=20, num_negatives=6, min_score=0.9), "n-tuple"
    elif case == "empty-blocks":  # blocks of no rows at all (parts of 0 rows left out)
        cfg = MineConfig(batch_size=20, num_negatives=6, min_score=0.95)
    elif case == "random-positive":
        cfg = MineConfig(batch_size=33, positive="random", sampling="softmax")
    a, sa, b, sb, _, _ = both(store, tmp_path, cfg, "pairs.parquet", fmt, index)
    if case == "short":
        assert sa["anchors_short"] > 0 and a["negative_path_6"].isna().any()
        assert a["negative_path_6"].isna().groupby(a.index // 20).all().any()
    if case == "empty-blocks":
        assert sa["anchors_without_negatives"] > 170
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b)
    same_stats(sa, sb)
    assert sb["negatives_same_label"] is not None


def pickled_blocks(fn, shared, spans):
    """Each block given a pickled copy of what it shares, as a Ray worker gets it."""
    import pickle

    for span in spans:
        yield fn(pickle.loads(pickle.dumps(shared)), span)


@pytest.mark.parametrize("case", ["default", "keep", "attract", "ivf", "positives-only",
                                  "labels", "votes"])
def test_rules_and_mined_positives_parts_equal_local(store, tmp_path, case, monkeypatch):
    """With false-negative rules and mined positives the blocks write the parts too (the
    plan holds the vectors, the rules' context, the index and every anchor's mined
    positives; each block adds its anchors' mined rows): the table and the stats are
    those of the run in memory, for every mode, format, index and rule set."""
    from pairkit.mine import command
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.positives import PositiveConfig

    rules = ("near-duplicate", "mutual-neighbour", "cluster")  # a store without labels
    cfg, fmt, index = MineConfig(batch_size=40), "triplet", None
    fn, pos = FalseNegativeConfig(rules=rules), PositiveConfig()
    if case == "keep":
        cfg, fmt = MineConfig(batch_size=40, fn_mode="keep"), "n-tuple"
    elif case == "attract":
        cfg, fmt = MineConfig(batch_size=40, fn_mode="attract"), "labeled-pair"
    elif case == "ivf":  # the masked IVF search that skips the anchor's clusters
        index = IndexOptions(kind="ivf", device="cpu", backend="faiss", nlist=8)
    elif case == "positives-only":
        fn = None
    elif case == "labels":  # the store's labels trusted: the label rule skips the label
        fn = FalseNegativeConfig()
    elif case == "votes":  # per-cluster indices of one vote, retries, a sampled window
        fn = FalseNegativeConfig(rules=rules, cluster_ks=(5,), cluster_runs=2,
                                 cluster_votes=1)
        cfg = MineConfig(batch_size=40, sampling="softmax", range_max=30)
        index = IndexOptions(kind="hnsw", device="cpu", backend="faiss")
    index = index or IndexOptions(kind="auto", device="cpu", backend="faiss")
    kw = {"fmt": fmt, "index": index, "fn_config": fn, "positives": pos}
    # in memory (mine_store), not streamed: the streamed run adds its blocks' summaries as
    # the parts do (mutation audit 4a, BP4: both kept the last block's count only)
    sa = mine_to_files(store.root, str(tmp_path / "a.parquet"), cfg, streamed=False, **kw)
    ex = Here(pickled_blocks)
    monkeypatch.setattr(command, "mine_store", None)  # the parts path, or a TypeError
    sb = mine_to_files(store.root, str(tmp_path / "b.parquet"), cfg, executor=ex, **kw)
    from pairkit.mine.block_parts import mine_block_part

    assert ex.fn is mine_block_part
    a, b = read_table(tmp_path / "a.parquet"), read_table(tmp_path / "b.parquet")
    assert (a["positive_kind"] == "mined").sum() > 0
    if case == "keep":
        assert a["false_negative"].any()
    if case == "attract":
        assert sa["attracted"] > 0
    if case in ("default", "ivf"):
        assert sa["cluster_rows_not_searched"]
    if case == "labels":
        assert sa["label_rows_not_searched"]
    pd.testing.assert_frame_equal(a, b)
    assert {k: v for k, v in sa.items() if k != "seconds"} == \
        {k: v for k, v in sb.items() if k != "seconds"}
    assert list(sa) == list(sb)


def test_label_relation_parts_equal_local(store, tmp_path):
    cfg = MineConfig(batch_size=50, max_positives=3)
    index = IndexOptions(kind="flat", device="cpu", backend="faiss")
    sa = mine_to_files(store.root, str(tmp_path / "a.parquet"), cfg, relation="label",
                       index=index, streamed=False)
    sb = mine_to_files(store.root, str(tmp_path / "b.parquet"), cfg, relation="label",
                       index=index, executor=Here())
    pd.testing.assert_frame_equal(read_table(tmp_path / "a.parquet"),
                                  read_table(tmp_path / "b.parquet"))
    same_stats(sa, sb)


def test_pairs_relation_parts_equal_local_with_its_stats_and_progress(store, tmp_path):
    """Mutation audit 4a (PR5, PR6, PR8): a ``pairs:FILE`` run by blocks keeps the
    relation's stats (rows, unknown rows, their examples: hand-counted) and reports its
    progress block by block (anchors per block, not the running total)."""
    paths = store.items["path"].drop_duplicates().tolist()
    f = tmp_path / "pairs.csv"
    pd.DataFrame({"anchor": paths[0:20:2] + ["nope.jpg"],
                  "positive": paths[1:21:2] + [paths[0]]}).to_csv(f, index=False)
    cfg, rel = MineConfig(batch_size=7), f"pairs:{f}"
    sa = mine_to_files(store.root, str(tmp_path / "a.parquet"), cfg, relation=rel,
                       streamed=False)
    seen, started = [], []
    sb = mine_to_files(store.root, str(tmp_path / "b.parquet"), cfg, relation=rel,
                       executor=Here(), progress=seen.append, on_start=started.append)
    pd.testing.assert_frame_equal(read_table(tmp_path / "a.parquet"),
                                  read_table(tmp_path / "b.parquet"))
    same_stats(sa, sb)
    assert (sb["pairs_rows"], sb["pairs_rows_unknown"]) == (11, 1)
    assert sb["pairs_unknown_examples"] == ["nope.jpg"]
    assert started == [20] and seen == [7, 7, 6]  # 10 anchor paths of 2 views each


def test_dataset_output_one_part_per_block(store, tmp_path):
    a, sa, b, sb, a_out, b_out = both(store, tmp_path, MineConfig(batch_size=50), "pairs/")
    names = sorted(p.name for p in b_out.iterdir())
    assert names == sorted(p.name for p in a_out.iterdir()) == [
        f"part-0000{i}.parquet" for i in range(4)]  # 180 anchors, 50 per block
    for name in names:
        pd.testing.assert_frame_equal(pd.read_parquet(a_out / name), pd.read_parquet(b_out / name))
    pd.testing.assert_frame_equal(a, b)
    same_stats(sa, sb)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left


def test_failed_block_leaves_no_output_and_rerun_works(store, tmp_path):
    out = tmp_path / "pairs.parquet"

    def fail_third(fn, shared, spans):
        for i, span in enumerate(spans):
            if i == 2:
                raise PairkitError("mining a block of anchors failed on a Ray worker: boom")
            yield fn(shared, span)

    with pytest.raises(PairkitError, match="boom"):
        mine_to_files(store.root, str(out), MineConfig(batch_size=40), executor=Here(fail_third))
    assert list(tmp_path.iterdir()) == []  # no output, no parts folder
    stats = mine_to_files(store.root, str(out), MineConfig(batch_size=40), executor=Here())
    local = mine_to_files(store.root, str(tmp_path / "local.parquet"), MineConfig(batch_size=40),
                          streamed=False)
    pd.testing.assert_frame_equal(read_table(out), read_table(tmp_path / "local.parquet"))
    same_stats(local, stats)


def test_block_mined_twice_is_counted_once(store, tmp_path):
    """A worker that died after writing its part: the block runs again and writes the
    same part again; its summary is kept once."""
    def twice(fn, shared, spans):
        for i, span in enumerate(spans):
            if i == 1:
                fn(shared, span)  # the lost attempt: its part written, its result lost
            yield fn(shared, span)

    a, sa, b, sb, _, _ = both(store, tmp_path, MineConfig(batch_size=40), "pairs.parquet",
                              executor=Here(twice))
    pd.testing.assert_frame_equal(a, b)
    same_stats(sa, sb)


def test_existing_output_refused_before_work_and_replaced_with_force(store, tmp_path):
    out = tmp_path / "pairs.parquet"
    out.write_bytes(b"old")
    ex = Here()
    with pytest.raises(PairkitError, match="exists"):
        mine_to_files(store.root, str(out), MineConfig(batch_size=40), executor=ex)
    assert ex.calls == 0 and out.read_bytes() == b"old"
    mine_to_files(store.root, str(out), MineConfig(batch_size=40), executor=ex, force=True,
                  stats_path=tmp_path / "stats.json")
    assert len(read_table(out)) == json.loads((tmp_path / "stats.json").read_text())["rows"]


def test_stdout_and_csv_outputs_keep_the_table_on_the_driver(store, tmp_path):
    ex = Here()
    mine_to_files(store.root, str(tmp_path / "p.csv"), MineConfig(batch_size=40), executor=ex)
    from pairkit.mine.blocks import mine_block

    assert ex.fn is mine_block


def test_summary_counts_equal_summary_stats(store, tmp_path):
    """Blocks' summaries added up give summary_stats of the whole run, and the label
    share; checked against the functions the local path calls, on a run with short
    anchors."""
    from pairkit.core.blocks_here import block_spans
    from pairkit.core.relations import load_relation
    from pairkit.core.store import codes_of
    from pairkit.mine.hard_negatives import mine_negatives, plan_blocks

    x = store.vectors()
    rel = load_relation(None, store.items)
    cfg = MineConfig(batch_size=25, num_negatives=4, min_score=0.8)

    def exact(q, k):
        s = q @ x.T
        i = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(s, i, 1).astype(np.float32), i.astype(np.int64)

    whole = mine_negatives(x, store.source_codes(), rel, cfg, exact)
    blocks = plan_blocks(x, store.source_codes(), rel, cfg, exact)
    codes = codes_of(store.labels())[0]
    counts = SummaryCounts(4, True, blocks.k0, StreamQuantiles(tmp_path, "pos"),
                           StreamQuantiles(tmp_path, "neg"))
    from pairkit.mine.blocks import mine_block

    same = both_ = 0
    for span in block_spans(len(blocks.anchors), cfg.batch_size):
        part = mine_block(blocks, span)
        s = summarize(part, 0, codes, 4, True, tmp_path, span[0] // cfg.batch_size)
        counts.add(s)
        same, both_ = same + s.same_label[0], both_ + s.same_label[1]
    assert counts.stats() == summary_stats(whole, 4, True)
    assert counts.negatives_same_label() == same_label_share(whole.pairs, store.labels())
    assert same_label_counts(whole.pairs, codes) == (same, both_)
    assert summary_stats(whole, 4, True)["anchors_short"] > 0
    assert len(QUANTILES) == 7


@pytest.mark.parametrize("seed", range(6))
def test_stream_quantiles_equal_numpy(tmp_path, seed):
    rng = np.random.default_rng(seed)
    n = [1, 2, 7, 1000, 4097, 30000][seed]
    x = [rng.normal(size=n), rng.integers(-3, 3, n) / 4, 0.6 + 1e-3 * rng.random(n),
         np.full(n, 0.7), rng.normal(size=n) * 1e-30, rng.random(n)][seed].astype(np.float32)
    q = StreamQuantiles(tmp_path)
    for part in np.array_split(x, 3):
        q.add(part)
    qs = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)
    assert q.quantiles(qs) == [float(v) for v in np.quantile(x.astype(np.float64), qs)]
    q.close()
    assert list(tmp_path.iterdir()) == []


def test_stream_quantiles_empty_and_nan(tmp_path):
    q = StreamQuantiles(tmp_path)
    assert q.quantiles((0.5,)) is None
    q.add(np.array([1.0, np.nan], np.float32))
    assert np.isnan(q.quantiles((0.5,))[0])
    assert np.isnan(np.quantile(np.array([1.0, np.nan]), 0.5))
    q.close()


def test_stale_parts_folders_removed_fresh_ones_kept(store, tmp_path):
    """A killed driver's parts folder (untouched for a day) is removed by the next run to
    the same output; a live run's (fresh) one and other outputs' folders are kept."""
    import os

    from pairkit.core.atomic import STALE_S, remove_stale_parts

    old, fresh, other = (tmp_path / n for n in (".pairs.parquet.abcd1234.tmp",
                                                ".pairs.parquet.efgh5678.tmp",
                                                ".other.parquet.abcd1234.tmp"))
    for folder in (old, fresh, other):
        folder.mkdir()
        (folder / "part-00000.parquet").write_bytes(b"x")
    past = os.stat(fresh).st_mtime - STALE_S - 10
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    mine_to_files(store.root, str(tmp_path / "pairs.parquet"), MineConfig(batch_size=40),
                  executor=Here())
    assert not old.exists() and fresh.exists() and other.exists()
    assert remove_stale_parts(tmp_path / "pairs.parquet") == []


@pytest.mark.parametrize("blocks", ["here", "pickled"])
def test_parts_time_the_index_and_the_search(store, tmp_path, blocks):
    """Found by a CLI bug hunt (2026-12-06): a run mined block by block said ``index`` 0.0
    and ``search`` 0.0 seconds in ``--stats``; they are the blocks' own (added up over the
    blocks, each worker building its index)."""
    big = random_store(tmp_path / "big", n_sources=1500, views=2, dim=32, classes=5)
    ex = Here(pickled_blocks if blocks == "pickled" else None)
    ivf = IndexOptions(kind="ivf", device="cpu", backend="faiss", nlist=16)
    _, sa, _, sb, _, _ = both(big, tmp_path, MineConfig(batch_size=1000), "pairs.parquet",
                              index=ivf, executor=ex)
    for s in (sa, sb):
        assert s["seconds"]["index"] > 0 and s["seconds"]["search"] > 0, s["seconds"]
    # the blocks (and each pickled block's own index) ran within "mine", one at a time
    assert sb["seconds"]["index"] + sb["seconds"]["search"] <= sb["seconds"]["mine"]


def test_summary_counts_add_every_block():
    """Mutation audit 4a (BP3, BP4, BP5): two blocks' summaries added by hand: sums, the
    larger rank and k, and the files of both blocks' scores."""
    from pairkit.mine.block_parts import BlockSummary
    from pairkit.mine.stats import RANK_BINS

    class Files:
        def __init__(self):
            self.added = []

        def add_file(self, *args):
            self.added.append(args[0])

    def block(n, rank_max, attracted, same, k_max, removed):
        return BlockSummary(
            rows=n, per_anchor=np.array([0, n]), pos_keys=(f"pos{n}", np.zeros(1), 0),
            neg_keys=(f"neg{n}", np.zeros(1), 0),
            rank_counts=np.eye(len(RANK_BINS), dtype=np.int64)[-1] * n, rank_max=rank_max,
            removed=removed, fn_flagged={}, retries=1, anchors_retried=1, k_max=k_max,
            same_label=same, attracted=attracted)

    counts = SummaryCounts(1, True, 2, Files(), Files())
    counts.add(block(3, 12_000, 5, (1, 3), 4, {"self": 3}))
    counts.add(block(2, 10_500, 2, (2, 2), 3, {"self": 2, "positive": 1}))
    assert counts.rows == 5 and counts.per_anchor.tolist() == [0, 5]
    assert counts.rank_max == 12_000 and counts.attracted == 7 and counts.k_max == 4
    assert (counts.same, counts.both) == (3, 5) and counts.removed == {"self": 5, "positive": 1}
    assert counts.retries == 2 and counts.pos.added == ["pos3", "pos2"]
    assert counts.neg.added == ["neg3", "neg2"]


@pytest.mark.parametrize("rules", [("mutual-neighbour", "cluster"), ("cluster",)])
def test_the_plan_keeps_the_mutual_rules_source_pairs_when_it_drops_the_lists(rules):
    """drop_plan_only makes the mutual-neighbour rule's sorted source pairs from the plan's
    whitened lists before it forgets them (else every block or worker would search all rows
    again for them, and with an approximate index not the plan's lists); hand-computed
    keys a * n_sources + b of the mutual pairs (0,1), (0,2), (1,3), (2,3) of four sources."""
    from types import SimpleNamespace

    from pairkit.mine.rules_plan import drop_plan_only

    ids = np.array([[1, 2], [0, 3], [3, 0], [2, 1]], dtype=np.int64)
    ctx = SimpleNamespace(spectral=None, whitened_neighbours=(ids, np.ones(ids.shape, np.float32)),
                          mutual_source_keys=None, sources=np.arange(4, dtype=np.int64))
    drop_plan_only(ctx, SimpleNamespace(rules=rules))
    assert ctx.whitened_neighbours is None
    if "mutual-neighbour" in rules:
        assert ctx.mutual_source_keys.tolist() == [1, 2, 4, 7, 8, 11, 13, 14]
    else:
        assert ctx.mutual_source_keys is None
