"""The range search by tiles (pairkit/index/tiled_range.py) finds exactly the pairs of the
global range search, each once, whatever the blocks (one, several, uneven, of one row):
pairs across block boundaries included; and a tile task reads only its blocks' rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.core.blocks_here import map_here
from pairkit.core.row_view import RowView, store_view
from pairkit.core.store_writer import write_store
from pairkit.index.range_search import range_search_blocks
from pairkit.index.tiled_range import (
    TILE_BYTES,
    TileShared,
    task_rows,
    tile_row,
    tile_spans,
    tile_tasks,
    tiled_pairs,
)


def planted(n: int = 2400, d: int = 32, seed: int = 0) -> np.ndarray:
    """Random unit rows with near-copies planted far apart (row k and row n - 1 - k for
    the first tenth: pairs across any block boundary) and next to each other."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    m = n // 10
    x[n - m:] = x[:m][::-1] + 0.05 * rng.normal(size=(m, d))
    x[m:2 * m:2] = x[m + 1:2 * m:2] + 0.1 * rng.normal(size=(len(x[m:2 * m:2]), d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def global_pairs(rows: np.ndarray, threshold: float, batch_size: int = 256
                 ) -> dict[tuple[int, int], float]:
    """The global search's pairs as the dedup keeps them (``b > a``), with their scores."""
    out: dict[tuple[int, int], float] = {}
    for a, b, s in range_search_blocks(rows, rows, threshold, batch_size=batch_size):
        keep = b > a
        out.update(zip(zip(a[keep].tolist(), b[keep].tolist(), strict=True),
                       s[keep].tolist(), strict=True))
    return out


def tile_dict(stream) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for a, b, s in stream:
        assert a.dtype == b.dtype == np.int64 and s.dtype == np.float32
        assert (a < b).all(), "a self pair, or a pair the wrong way round"
        for key, score in zip(zip(a.tolist(), b.tolist(), strict=True), s.tolist(),
                              strict=True):
            assert key not in out, f"pair {key} came out twice"
            out[key] = score
    return out


def same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    if want:
        keys = list(want)
        np.testing.assert_allclose([got[k] for k in keys], [want[k] for k in keys],
                                   rtol=0, atol=1e-6)


@pytest.fixture(scope="module", params=["float16", "float32"])
def view(request, tmp_path_factory):
    """One row per source of a store (every other row dropped, as a dedup's units of
    sources with views), read on demand: the RowView ``dedup --ray`` hands its workers."""
    from pairkit.core.store import Store

    rows = planted()
    items = pd.DataFrame({"path": [f"i{k:05d}.jpg" for k in range(len(rows))]})
    where = tmp_path_factory.mktemp("tiles") / "st"
    write_store(where, rows, items, dtype=request.param, shard_rows=700)
    keep = np.r_[0:2000, 2001:2400:2]  # one source's second view dropped, and others
    return store_view(Store.open(where)).subset(keep)


@pytest.mark.parametrize("threshold", [0.95, 0.8, 0.3])
@pytest.mark.parametrize("layout", ["one", "two", "three-uneven", "one-row", "pieces"])
def test_tiles_equal_the_global_search(view, threshold, layout, monkeypatch):
    n = len(view)
    want = global_pairs(np.asarray(view), threshold)
    spans = {"one": [(0, n)], "two": [(0, n // 2), (n // 2, n)],
             "three-uneven": [(0, 700), (700, 2100), (2100, n)],
             "one-row": [(0, 100), (100, 101), (101, n)],
             "pieces": [(0, 900), (900, n)]}[layout]
    if layout == "pieces":  # a block j read into its index in pieces of 100 rows
        monkeypatch.setattr("pairkit.index.tiled_range.PIECE_ROWS", 100)
    shared = TileShared(view, spans, threshold, 256)
    got = tile_dict(map_here(tile_row, shared, tile_tasks(len(spans), tasks=4)))
    same(got, want)
    if threshold >= 0.8:
        cross = [k for k in got if np.searchsorted([s[1] for s in spans], k[0], "right")
                 != np.searchsorted([s[1] for s in spans], k[1], "right")]
        assert len(want) >= 200 and (len(spans) == 1 or len(cross) >= 40)
        if layout == "one-row" and threshold <= 0.8:  # the row and its planted copy
            assert any(100 in k for k in got)


@pytest.mark.parametrize("budget", [TILE_BYTES, 128 * 700, 128 * 333])
@pytest.mark.parametrize("tasks", [1, 3, 8])
def test_tiled_pairs_by_budget_and_tasks(tasks, budget):
    rows = planted(1500, 32, seed=1)
    want = global_pairs(rows, 0.85)
    got = tile_dict(tiled_pairs(rows, 0.85, map_here, tasks=tasks, batch_size=128,
                                min_rows=100, tile_bytes=budget))
    same(got, want)
    assert len(want) >= 150


def test_tile_spans_and_tasks():
    assert tile_spans(0, 16) == []
    assert tile_spans(5000, 64) == [(0, 5000)]  # small: one tile
    assert tile_spans(5000, 64, tasks=8, min_rows=4096) == [(0, 2500), (2500, 5000)]
    assert len(tile_spans(5000, 64, tasks=8, min_rows=100)) == 4  # 10 tiles >= 8 tasks
    # 256 MiB of float32 a block: 87,381 rows of 768
    spans = tile_spans(1_000_000, 768)
    assert len(spans) == 12 and max(b - a for a, b in spans) * 768 * 4 <= TILE_BYTES
    spans = tile_spans(10, 4, tile_bytes=16)  # one row a block
    assert spans == [(k, k + 1) for k in range(10)]
    for blocks in (1, 2, 3, 7):
        for tasks in (1, 2, 5, 40):
            work = tile_tasks(blocks, tasks)
            tiles = [(i, j) for i, js in work for j in js]
            assert sorted(tiles) == [(i, j) for i in range(blocks) for j in range(i, blocks)]
            assert all(list(js) == list(range(js[0], js[-1] + 1)) for _, js in work)
            n_tiles = blocks * (blocks + 1) // 2
            assert max(len(js) for _, js in work) <= -(-n_tiles // tasks)


class Guarded:
    """Rows that refuse every read outside the rows ``allowed`` and list what was read."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows, self.shape = rows, rows.shape
        self.allowed: set[int] = set()
        self.read: list[range] = []

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        assert isinstance(key, slice)
        got = range(*key.indices(len(self.rows)))
        outside = set(got) - self.allowed
        assert not outside, f"read rows outside the task's blocks: {sorted(outside)[:5]}"
        self.read.append(got)
        return self.rows[key]


def test_a_tile_task_reads_only_its_blocks(monkeypatch):
    rows = planted(900, 16, seed=2)
    spans = [(0, 250), (250, 500), (500, 700), (700, 900)]
    guarded = Guarded(rows)
    monkeypatch.setattr("pairkit.index.tiled_range.PIECE_ROWS", 64)
    shared = TileShared(guarded, spans, 0.8, 64)
    for task in tile_tasks(len(spans), tasks=10):  # one tile a task
        i, js = task
        blocks = {i, *js}
        guarded.allowed = {r for b in blocks for r in range(*spans[b])}
        guarded.read = []
        tile_row(shared, task)
        read = [r for got in guarded.read for r in got]
        # each of its blocks once (block i once, the diagonal reusing it), nothing else
        assert sorted(read) == sorted(guarded.allowed)


def test_a_tile_task_reads_its_blocks_from_the_store(tmp_path, monkeypatch):
    """Through a RowView of a store: the rows a task takes are its blocks' only."""
    rows = planted(600, 16, seed=3)
    items = pd.DataFrame({"path": [f"i{k:04d}.jpg" for k in range(len(rows))]})
    from pairkit.core.store import Store

    st = write_store(tmp_path / "st", rows, items, dtype="float16", shard_rows=128)
    view = store_view(Store.open(st.root))
    taken: list[np.ndarray] = []
    real = RowView.take

    def counted(self, positions):
        taken.append(np.asarray(positions))
        return real(self, positions)

    monkeypatch.setattr(RowView, "take", counted)
    spans = [(0, 200), (200, 400), (400, 600)]
    shared = TileShared(view, spans, 0.8, 64)
    for task in [(0, (2,)), (1, (1,)), (0, (0, 1, 2))]:
        taken.clear()
        tile_row(shared, task)
        i, js = task
        want = sorted({r for b in {i, *js} for r in range(*spans[b])})
        assert sorted(np.concatenate(taken).tolist()) == want


def test_task_rows_by_hand_and_adding_up():
    """fix-small (``dedup --ray`` showed no progress): each tile task counts for a share
    of its block row's rows, the shares adding up to the rows."""
    spans = [(0, 10), (10, 20), (20, 27)]  # tiles: row 0 has 3, row 1 2, row 2 1
    work = [(0, (0, 1)), (0, (2,)), (1, (1,)), (1, (2,)), (2, (2,))]
    # row 0: 10 * 2 // 3 = 6, then 10 - 6 = 4; row 1: 5 and 5; row 2: 7
    assert task_rows(spans, work) == [6, 4, 5, 5, 7]
    for n, budget in ((1500, 128 * 333), (1000, 128 * 700), (37, 16)):
        spans = tile_spans(n, 4, tasks=5, min_rows=1, tile_bytes=budget)
        for tasks in (1, 2, 5, 40):
            work = tile_tasks(len(spans), tasks)
            shares = task_rows(spans, work)
            assert sum(shares) == n and min(shares) >= 0
            for i, (a, b) in enumerate(spans):  # each block row's rows exactly
                assert sum(m for m, (r, _) in zip(shares, work, strict=True) if r == i) == b - a


def test_tiled_pairs_progress_adds_up_and_changes_nothing():
    rows = planted(1500, 32, seed=1)
    steps: list[int] = []
    kw = {"tasks": 5, "batch_size": 128, "min_rows": 100, "tile_bytes": 128 * 333}
    got = tile_dict(tiled_pairs(rows, 0.85, map_here, progress=steps.append, **kw))
    same(got, tile_dict(tiled_pairs(rows, 0.85, map_here, **kw)))
    spans = tile_spans(1500, 32, tasks=5, min_rows=100, tile_bytes=128 * 333)
    assert len(spans) > 1 and steps == task_rows(spans, tile_tasks(len(spans), 5))
    assert sum(steps) == 1500
