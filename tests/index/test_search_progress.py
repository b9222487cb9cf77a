"""The progress hooks of the searches behind ``dedup``, ``issues`` and ``index``
(range_search_blocks, pairs_here and its partitioned plan, knn_search, build_index): the
hook is told the total once and its advances add up to it, and the results are those of
a run without a hook (the hooks only count)."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core.blocks_here import map_here
from pairkit.index.range_search import range_search, range_search_blocks
from pairkit.index.search import knn_search
from tests.cli.test_progress import Hook  # the on_start / progress recorder


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def concat(parts) -> list[tuple[int, int]]:
    return sorted((int(a), int(b)) for q, i, _ in parts
                  for a, b in zip(q.tolist(), i.tolist(), strict=True))


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_range_search_blocks_advances_add_up_to_the_queries(backend):
    rng = np.random.default_rng(0)
    x = unit(rng.normal(size=(1000, 8)))
    hook = Hook()
    got = list(range_search_blocks(x, x, 0.8, batch_size=300, backend=backend,
                                   progress=hook.progress, on_start=hook.on_start))
    assert hook.starts == [1000]
    assert sum(hook.steps) == 1000 and len(hook.steps) >= 4  # blocks of <= 300 queries
    want = list(range_search_blocks(x, x, 0.8, batch_size=300, backend=backend))
    assert concat(got) == concat(want)
    # the pairs themselves, by an independent product: every (i, j) with x_i . x_j >= 0.8
    # (within float tolerance)
    s = x.astype(np.float64) @ x.T.astype(np.float64)
    sure = set(zip(*(a.tolist() for a in np.nonzero(s >= 0.8 + 1e-5)), strict=True))
    maybe = set(zip(*(a.tolist() for a in np.nonzero(s >= 0.8 - 1e-5)), strict=True))
    assert sure <= set(concat(got)) <= maybe and len(sure) > 1000


def test_range_search_blocks_of_no_base_still_adds_up():
    hook = Hook()
    x = np.zeros((5, 4), np.float32)
    assert list(range_search_blocks(x, np.zeros((0, 4), np.float32), 0.5,
                                    progress=hook.progress, on_start=hook.on_start)) == []
    assert hook.starts == [5] and sum(hook.steps) == 5


def test_knn_search_advances_add_up_to_the_queries():
    rng = np.random.default_rng(1)
    x = unit(rng.normal(size=(700, 8)))
    steps: list[int] = []
    s1, i1 = knn_search(x, x, 5, batch_size=128, progress=steps.append)
    s0, i0 = knn_search(x, x, 5, batch_size=128)
    assert sum(steps) == 700 and len(steps) == 6  # ceil(700 / 128)
    assert np.array_equal(i1, i0) and np.array_equal(s1, s0)


def test_partitioned_search_advances_add_up_to_the_rows(monkeypatch):
    """pairs_here by partitions (a clustered set, the plan worth it): on_start once with
    the rows, one advance per cluster (its members), adding up to the rows; the pairs are
    the global search's."""
    import pairkit.index.partitioned_range as pr

    monkeypatch.setattr(pr, "LOCAL_MIN_ROWS", 100)
    monkeypatch.setattr(pr, "ROWS_PER_PART", 50)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(40, 64))
    x = unit(centers[rng.integers(0, 40, 2000)] + 0.05 * rng.normal(size=(2000, 64)))
    plan = pr.plan_partitions(x, 0.95, map_here, rows_per_part=50)
    assert plan.worth_it()
    hook = Hook()
    got = {(int(a), int(b)) for a, b, _ in pr.pairs_here(
        x, x, 0.95, progress=hook.progress, on_start=hook.on_start)
        for a, b in zip(a.tolist(), b.tolist(), strict=True) if a < b}
    assert hook.starts == [2000] and sum(hook.steps) == 2000
    assert len(hook.steps) == int((plan.members > 0).sum()) > 5
    q, i, _ = range_search(x, x, 0.95)
    assert got == {(int(a), int(b)) for a, b in zip(q, i, strict=True) if a < b}


def test_global_pairs_here_passes_the_hook_on():
    rng = np.random.default_rng(2)
    x = unit(rng.normal(size=(500, 8)))
    hook = Hook()
    from pairkit.index.partitioned_range import pairs_here

    list(pairs_here(x, x, 0.9, batch_size=100, progress=hook.progress,
                    on_start=hook.on_start))
    assert hook.starts == [500] and sum(hook.steps) == 500


@pytest.mark.parametrize("kind", ["flat", "ivf", "ivfpq", "hnsw"])
def test_build_index_advances_add_up_to_the_rows(kind, monkeypatch):
    """build_index's hook: the rows added add up to N; an IVF index is trained first (a
    phase line); the index built in blocks (as the hook sees them) is byte for byte the
    one built in one add."""
    import faiss

    import pairkit.index.faiss_build as fb
    from pairkit.index.options import IndexOptions

    rng = np.random.default_rng(3)
    x = unit(rng.normal(size=(2500, 16)))
    spec = IndexOptions(kind=kind, nlist=16, seed=0).resolved(len(x), 16)
    whole = faiss.serialize_index(fb.build_index(x, spec)).tobytes()
    monkeypatch.setattr(fb, "ADD_BLOCK_ROWS", 700)
    hook, phases = Hook(), []
    built = fb.build_index(x, spec, progress=hook.progress, on_start=hook.on_start,
                           on_phase=phases.append)
    assert hook.starts == [2500] and sum(hook.steps) == 2500
    assert hook.steps == ([2500] if kind == "hnsw" else [700, 700, 700, 400])
    assert any("training" in p for p in phases) == kind.startswith("ivf")
    assert any("hnsw" in p for p in phases) == (kind == "hnsw")
    assert faiss.serialize_index(built).tobytes() == whole
