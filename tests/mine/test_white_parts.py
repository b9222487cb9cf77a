"""The rules' whitened neighbour lists searched by partition (pairkit/mine/white_parts.py),
run here (the functions the Ray workers run, one after the other): the table and the
stats equal the search's here; a partition reads only its cells' rows and the queries;
a plan made for another search is refused, never merged."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.index.options import IndexOptions
from pairkit.mine import white_parts
from pairkit.mine.config import MineConfig
from pairkit.mine.false_negatives import FalseNegativeConfig
from pairkit.mine.positives import PositiveConfig
from tests.mine.test_ivf_parts import run as mine_parts_run
from tests.mine.test_ivf_parts import same
from tests.mine.test_streamed import make_store

CPU = {"device": "cpu", "backend": "faiss"}


@pytest.fixture(scope="module")
def store16(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("white") / "st", "float16")


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """160 dims of near-isotropic noise around 5 classes: more than CANDIDATE_DIMS
    whitened components, so the candidates are searched in the leading ones and
    re-ranked in all."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(3)
    n_sources, d = 1100, 160
    centers = rng.normal(size=(5, d))
    base = centers[np.arange(n_sources) % 5] + 1.5 * rng.normal(size=(n_sources, d))
    x = np.repeat(base, 2, axis=0) + 0.2 * rng.normal(size=(2 * n_sources, d))
    sources = np.repeat(np.arange(n_sources), 2)
    items = pd.DataFrame({"path": [f"c{s % 5}/s{s}.jpg" for s in sources],
                          "view": np.tile([0, 1], n_sources),
                          "label": [f"c{s % 5}" for s in sources]})
    items["source"] = items["path"]
    return write_store(tmp_path_factory.mktemp("wide") / "st", x.astype(np.float32), items,
                       dtype="float16", shard_rows=700)


@pytest.fixture
def searched(monkeypatch):
    """The partitions searched, in call order; each gets the plan as a worker does,
    pickled (its views name the store: no row travels)."""
    import pickle

    calls: list[int] = []
    real = white_parts.search_white_partition

    def spy(job, part):
        calls.append(part)
        shipped = pickle.loads(pickle.dumps(job))
        assert shipped.cells is None or shipped.cells.spectral.reduced.rows is None
        return real(shipped, part)

    monkeypatch.setattr(white_parts, "search_white_partition", spy)
    return calls


def run(store, tmp_path, cfg, index, fn, pos, partitions, name):
    return mine_parts_run(store, tmp_path, cfg, index, partitions=partitions, name=name,
                          fn_config=fn, positives=pos)


@pytest.mark.parametrize("case", ["p1", "p3", "positives-only", "attract", "nprobe1",
                                  "rerank"])
def test_split_whitened_lists_equal_the_search_here(store16, wide, tmp_path, searched, case):
    cfg, fn, pos, parts = MineConfig(batch_size=300), FalseNegativeConfig(), \
        PositiveConfig(), 3
    index = IndexOptions(kind="ivf", nlist=8, nprobe=3, **CPU)
    st = store16
    if case == "p1":
        parts = 1
    elif case == "positives-only":  # no rule reads them: the mined positives do
        fn = None
    elif case == "attract":
        cfg = MineConfig(batch_size=300, fn_mode="attract")
    elif case == "nprobe1":
        index = IndexOptions(kind="ivf", nlist=8, nprobe=1, **CPU)
    elif case == "rerank":
        st = wide
    a, sa = run(st, tmp_path, cfg, index, fn, pos, 0, "here")
    assert searched == []
    b, sb = run(st, tmp_path, cfg, index, fn, pos, parts, "split")
    assert searched == list(range(parts))
    assert "whitened_lists" in sb["seconds"] and "whitened_lists" not in sa["seconds"]
    assert (a["positive_kind"] == "mined").sum() > 100
    same(a, sa, b, sb)
    if case == "rerank":  # the candidates came from the leading components
        from pairkit.mine.whitening import CANDIDATE_DIMS, fit_whitening

        assert fit_whitening(st.vectors(np.float32), seed=0).dims > CANDIDATE_DIMS


def test_no_split_when_no_rule_reads_them_or_the_search_is_exact(store16, tmp_path,
                                                                  searched):
    """Rules without the mutual-neighbour one and no mined positives, or an exact
    search of the space: nothing split, the plan searches as before."""
    cfg = MineConfig(batch_size=300)
    ivf = IndexOptions(kind="ivf", nlist=8, nprobe=3, **CPU)
    run(store16, tmp_path, cfg, ivf, FalseNegativeConfig(rules=("label", "cluster")), None, 3,
        "no-mutual")
    a, sa = run(store16, tmp_path, cfg, IndexOptions(kind="flat", **CPU),
                FalseNegativeConfig(), PositiveConfig(), 3, "exact")
    assert searched == [] and "whitened_lists" not in sa["seconds"]


def test_partition_reads_only_its_cells_and_the_queries(store16, tmp_path, monkeypatch):
    """A partition's worker reads the rows of its cells once and every row once as a
    query, nothing else; its files hold, per block of rows, the rows whose probes land in
    its cells, with the whole index's scores for them."""
    from dataclasses import replace

    from pairkit.core.store_rows import StoreRows
    from pairkit.mine.parts_run import PlanSpec
    from pairkit.mine.rules_plan import RulesSpec
    from tests.mine.test_ivf_parts import Guarded

    monkeypatch.setattr(white_parts, "QUERY_BLOCK", 500)
    index = IndexOptions(kind="ivf", nlist=8, nprobe=2, seed=0, **CPU)
    rows_from = StoreRows.of(store16, streamed=True, pinned=store16)
    spec = PlanSpec(None, MineConfig(), None, rows_from, str(tmp_path), "triplet",
                    RulesSpec(FalseNegativeConfig(), PositiveConfig(), index))
    job, info = white_parts.plan_white(spec, 2, 4)
    assert job is not None and info["parts"] == 4 and job.blocks == 5
    assert job.rows_from.ranged  # on object storage: byte ranges, no shard held
    lists = job.lists
    p = 2
    c0, c1 = lists.parts[p]
    mine = lists.ids[lists.offsets[c0]:lists.offsets[c1]]
    guarded = Guarded(store16.rows(), np.arange(store16.count))
    monkeypatch.setattr(StoreRows, "load", lambda self: guarded)
    assert white_parts.search_white_partition(job, p) == len(mine)
    assert guarded.read == len(mine) + store16.count
    space = job.view()[:]
    probes = lists.quantizer.search(space, lists.nprobe)[1]
    hit = ((probes >= c0) & (probes < c1)).any(axis=1)
    from pairkit.mine.ivf_parts import read_candidates

    got = [read_candidates(white_parts.white_path(str(tmp_path), b, p))
           for b in range(job.blocks)]
    rows = np.concatenate([f["rows"] + 500 * b for b, f in enumerate(got)])
    np.testing.assert_array_equal(rows, np.flatnonzero(hit))
    # each hit row's candidates: its best among the partition's cells that it probes
    for j in range(3):
        r = int(got[0]["rows"][j])
        cand = np.concatenate([lists.ids[lists.offsets[c]:lists.offsets[c + 1]]
                               for c in probes[r] if c0 <= c < c1]).astype(np.int64)
        scores = space[cand] @ space[r]
        order = np.lexsort((cand, -scores))[:job.k]
        np.testing.assert_array_equal(got[0]["ids"][j][:len(order)], cand[order])
        np.testing.assert_allclose(got[0]["scores"][j][:len(order)], scores[order],
                                   rtol=1e-5, atol=1e-6)
    # a plan for another search (another depth or space) is refused, not merged
    search = white_parts.SplitWhiteSearch(replace(job, k=3), store16.source_codes())
    from pairkit.errors import PairkitError

    with pytest.raises(PairkitError, match="whitened lists were searched"):
        search(space, 10)


def test_cluster_cells_found_by_the_workers(store16, tmp_path, monkeypatch, searched):
    """Above the cluster rule's spectral sample, every other row's nearest cell (what
    its runs and coordinates extend by) is found by the partitions' workers, a block of
    rows each, not by the plan reading every row: the same table and stats."""
    from functools import partial

    from pairkit.mine import spectral

    monkeypatch.setattr(spectral, "spectral_embedding",
                        partial(spectral.spectral_embedding, sample=500))
    monkeypatch.setattr(white_parts, "QUERY_BLOCK", 600)
    sizes: list[int] = []
    real = spectral.nearest_cells

    def recorded(reduced, rows, centroids):
        sizes.append(len(rows))
        return real(reduced, rows, centroids)

    monkeypatch.setattr(spectral, "nearest_cells", recorded)
    cfg, index = MineConfig(batch_size=300), IndexOptions(kind="ivf", nlist=8, nprobe=3, **CPU)
    a, sa = run(store16, tmp_path, cfg, index, FalseNegativeConfig(), PositiveConfig(), 0,
                "here")
    assert sizes == [store16.count - 500]  # the plan: every row outside the sample at once
    sizes.clear()
    b, sb = run(store16, tmp_path, cfg, index, FalseNegativeConfig(), PositiveConfig(), 3,
                "split")
    assert searched == [0, 1, 2]
    # the workers: four blocks of 600 rows (the last 400), the sample's rows left out
    assert len(sizes) == 4 and sum(sizes) == store16.count - 500 and max(sizes) <= 600
    assert sa["clusters"] == sb["clusters"] and sa["clusters"]
    same(a, sa, b, sb)


def test_split_lists_search_only_the_big_source_deep(tmp_path, monkeypatch):
    """A store with one source over ``OVER_FETCH_ROWS`` rows: the partitions search its
    rows m + its size deep into files of their own, every other row m + the largest of
    the rest (failed before: every row of every block m + 300 in every partition); the
    table and stats equal the search's here (the same depths, through the whole index)."""
    from pairkit.core.store_writer import write_store
    from pairkit.index import outside
    from pairkit.mine import ivf_parts

    big = 300
    monkeypatch.setattr(outside, "OVER_FETCH_ROWS", big // 2)
    monkeypatch.setattr(white_parts, "QUERY_BLOCK", 1000)  # blocks with and without it
    rng = np.random.default_rng(7)
    n_sources = 950
    centers = rng.normal(size=(5, 16))
    base = centers[np.arange(n_sources) % 5] + 0.5 * rng.normal(size=(n_sources, 16))
    x = np.concatenate([centers[0] + 0.5 * rng.normal(size=(big, 16)),
                        np.repeat(base, 2, axis=0) + 0.1 * rng.normal(size=(2 * n_sources, 16))])
    sources = np.concatenate([np.zeros(big, np.int64), 1 + np.repeat(np.arange(n_sources), 2)])
    items = pd.DataFrame({"path": [f"r{r}.jpg" for r in range(len(x))],
                          "source": [f"s{s}" for s in sources],
                          "view": np.concatenate([np.arange(big), np.tile([0, 1], n_sources)]),
                          "label": [f"c{(s - 1) % 5 if s else 0}" for s in sources]})
    store = write_store(tmp_path / "st", x.astype(np.float32), items, dtype="float16",
                        shard_rows=700)
    calls: list[tuple[int, int]] = []
    real = ivf_parts.partial_search

    def recorded(index, queries, k):  # noqa: ANN001, ANN202
        calls.append((len(queries), k))
        return real(index, queries, k)

    monkeypatch.setattr(ivf_parts, "partial_search", recorded)
    cfg, fn, pos = MineConfig(batch_size=300), FalseNegativeConfig(), PositiveConfig()
    index = IndexOptions(kind="ivf", nlist=8, nprobe=3, **CPU)
    a, sa = run(store, tmp_path, cfg, index, fn, pos, 0, "here")
    calls.clear()
    b, sb = run(store, tmp_path, cfg, index, fn, pos, 3, "split")
    deep = [(n, k) for n, k in calls if k > 100]
    assert sum(n for n, _ in deep) == 3 * big, calls  # once per partition
    assert (a["positive_kind"] == "mined").sum() > 50
    same(a, sa, b, sb)
