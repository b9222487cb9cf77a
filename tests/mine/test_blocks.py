"""Blocks of anchors: each block's result is a table of its own, and the merge of the
blocks is the run's result whatever the block size."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.pairs import build_pair_table
from pairkit.core.relations import build_relation
from pairkit.index.search import knn_search
from pairkit.mine.config import MineConfig
from pairkit.mine.hard_negatives import mine_negatives
from tests.conftest import random_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("b") / "s", n_sources=50, views=3, dim=16,
                        classes=5)


def flag_multiple_of_3(anchors, cand, scores, ref, positives):  # noqa: ANN001, ANN201
    flags = (cand >= 0) & (cand % 3 == 0)
    return flags, np.where(flags, "label", None).astype(object)


def test_attracted_rows_of_a_block_and_of_the_run_agree(store) -> None:  # noqa: ANN001
    """Attracted rows carry rank -1 (a flagged candidate has no rank among the valid
    ones) in a block's result as in the run's: each block's pairs make its own table,
    equal to the run's rows of those anchors."""
    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    src = store.source_codes()
    paths = store.items["path"].to_numpy(dtype=object)
    parts = []

    def capture(fn, shared, spans):  # noqa: ANN001, ANN202
        for span in spans:
            part = fn(shared, span)
            parts.append((span, part))
            yield part

    cfg = MineConfig(fn_mode="attract", batch_size=40)
    run = mine_negatives(x, src, rel, cfg, lambda q, k: knn_search(q, x, k),
                         flag_multiple_of_3, map_blocks=capture)
    assert len(parts) > 2
    p = run.pairs
    assert len(p.fn_ids) > 0
    np.testing.assert_array_equal(p.fn_ranks, np.full(len(p.fn_ids), -1))
    whole = build_pair_table(p, "triplet", "s", paths)
    for (b0, b1), part in parts:
        q = part.pairs
        assert q.fn_ranks is not None and len(q.fn_ranks) == len(q.fn_ids)
        assert (q.fn_ranks == -1).all()
        table = build_pair_table(q, "triplet", "s", paths)
        anchors = set(p.anchors[b0:b1].tolist())
        want = whole[whole["anchor_id"].isin(anchors)].reset_index(drop=True)
        assert table.equals(want)


@pytest.mark.parametrize("fn_mode", ["eliminate", "keep", "attract"])
def test_block_size_does_not_change_the_result(store, fn_mode: str) -> None:  # noqa: ANN001
    x = store.vectors(np.float32)
    rel = build_relation("instance", store.items)
    src = store.source_codes()
    paths = store.items["path"].to_numpy(dtype=object)
    tables = []
    for batch_size in (7, 64, 10_000):
        cfg = MineConfig(fn_mode=fn_mode, batch_size=batch_size, sampling="softmax",
                         range_max=20)
        res = mine_negatives(x, src, rel, cfg, lambda q, k: knn_search(q, x, k),
                             flag_multiple_of_3)
        tables.append(build_pair_table(res.pairs, "triplet", "s", paths,
                                       flag_columns=fn_mode == "keep"))
    assert tables[0].equals(tables[1]) and tables[1].equals(tables[2])


@pytest.mark.parametrize(("hard", "kind"), [(True, "flat"), (True, "ivf"), (False, "auto")])
def test_blocks_that_read_the_store_where_they_run(tmp_path, hard: bool, kind: str) -> None:
    """``mine_store`` with a ``map_blocks`` whose workers read the store themselves
    (``workers_read_store``, as a Ray cluster's): what it ships (pickled here, as Ray
    does) holds neither the vectors nor an index, each "worker" (a fresh load) builds the
    index by the one entry point, and the table and stats are the local run's."""
    import pickle

    import pandas as pd

    from pairkit.core import store_rows
    from pairkit.core.blocks_here import map_here
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store

    st = random_store(tmp_path / "s", n_sources=120, views=2, dim=16, classes=5)
    shipped = []

    def elsewhere(fn, shared, spans):  # noqa: ANN001, ANN202
        data = pickle.dumps(shared)
        shipped.append(len(data))
        store_rows.LOADED.clear()  # a new process: nothing read yet
        return map_here(fn, pickle.loads(data), spans)

    elsewhere.workers_read_store = True  # type: ignore[attr-defined]
    cfg = MineConfig(hard=hard, batch_size=32, num_negatives=4)
    idx = IndexOptions(kind=kind, nlist=8, device="cpu", backend="faiss")
    want, sw = mine_store(st, None, cfg, idx)
    got, sg = mine_store(st, None, cfg, idx, map_blocks=elsewhere)
    pd.testing.assert_frame_equal(got, want)
    for key in ("anchors", "rows", "removed", "neg_score", "rank_histogram", "k_max"):
        assert sg.get(key) == sw.get(key), key
    assert sg["index"] == (sw["index"].replace("built now", "built on each worker")
                           if hard else sw["index"])
    vector_bytes = st.count * 16 * 4
    assert shipped and shipped[0] < vector_bytes  # the vectors (19 KB) were not shipped
    assert len(store_rows.LOADED) == 1  # read from the store where the blocks ran
    store_rows.LOADED.clear()
