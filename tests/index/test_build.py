"""Index kinds: recall against exact search, auto choice, save/load tied to the store rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.errors import PairkitError
from pairkit.index.faiss_build import build_index
from pairkit.index.open import open_searcher
from pairkit.index.options import IndexOptions, choose_kind, default_pq_m
from pairkit.index.saved import index_paths, load_index, save_index
from pairkit.index.search import knn_search
from tests.conftest import random_store


@pytest.fixture(autouse=True, scope="module")
def _one_faiss_thread():
    """k-means training is ~10x slower with OpenMP threads fighting on a busy 2-core box."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def clustered(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(max(2, n // 100), d))
    x = centers[rng.integers(0, len(centers), n)] + 0.5 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def recall(ids: np.ndarray, ref: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids, ref, strict=True)]))


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    x = clustered(1500, 16)
    _, ref = knn_search(x, x, 10)
    return x, ref


@pytest.mark.parametrize(
    ("kind", "float16", "floor"),
    [("flat", False, 1.0), ("flat", True, 0.99), ("ivf", False, 0.95), ("ivf", True, 0.95),
     ("hnsw", False, 0.95), ("ivfpq", False, 0.85)],
)
def test_recall_against_exact(data, kind: str, float16: bool, floor: float) -> None:
    x, ref = data
    loaded = open_searcher(x, IndexOptions(kind=kind, float16=float16, device="cpu"))
    scores, ids = loaded.search(x, 10)
    assert recall(ids, ref) >= floor
    # scores are true inner products (re-scored for lossy indices), best first
    valid = ids >= 0
    true = np.einsum("nd,nkd->nk", x, x[np.maximum(ids, 0)])
    np.testing.assert_allclose(scores[valid], true[valid], atol=1e-5)
    assert (np.diff(np.where(valid, scores, -np.inf), axis=1) <= 1e-6).all()


def test_list_major_ivf_equals_faiss_ivf_search(data) -> None:
    from pairkit.index.search import IvfListMajor

    x, _ = data
    loaded = open_searcher(x, IndexOptions(kind="ivf", nprobe=3, device="cpu"))
    assert IvfListMajor.supports(loaded.index)
    assert not IvfListMajor.worthwhile(loaded.index)  # 1500 rows: lists too short
    def opened(**options):  # noqa: ANN003, ANN202
        return open_searcher(x, IndexOptions(device="cpu", **options)).index

    assert IvfListMajor.worthwhile(opened(kind="ivf", nlist=4))
    assert not IvfListMajor.supports(opened(kind="flat"))
    assert not IvfListMajor.supports(opened(kind="ivf", float16=True))
    ref_s, ref_i = knn_search(x, loaded.index, 12)
    got_s, got_i = knn_search(x, IvfListMajor(loaded.index), 12, batch_size=500)
    np.testing.assert_allclose(got_s, ref_s, atol=1e-5)
    assert (got_i == ref_i).mean() > 0.999  # only float-rounding near-ties may swap
    # fewer rows reachable than k: padded like FAISS
    s, i = IvfListMajor(loaded.index).search(x[:3], 1500)
    assert (i[:, -1] == -1).all() and np.isneginf(s[:, -1]).all()


def test_more_nprobe_more_recall(data) -> None:
    x, ref = data
    low = open_searcher(x, IndexOptions(kind="ivf", nprobe=1, device="cpu")).search(x, 10)[1]
    high = open_searcher(x, IndexOptions(kind="ivf", nprobe=64, device="cpu")).search(x, 10)[1]
    assert recall(high, ref) >= recall(low, ref)
    assert recall(high, ref) == 1.0  # every cell scanned = exact


def test_auto_choice_is_stated() -> None:
    assert choose_kind(100, 1000)[0] == "flat"
    kind, reason = choose_kind(5000, 1000)
    assert kind == "ivf" and "approximate" in reason and "5,000" in reason
    x = clustered(600, 8)
    small = open_searcher(x, IndexOptions(kind="auto", device="cpu"))
    assert small.options.kind == "flat" and "exact" in small.describe()
    big = open_searcher(x, IndexOptions(kind="auto", exact_max_rows=100, device="cpu"))
    assert big.options.kind == "ivf" and "approximate" in big.describe()


def test_spec_defaults_and_errors() -> None:
    spec = IndexOptions(kind="ivf").resolved(10_000, 64)
    assert spec.nlist == 100 and spec.nprobe == 8
    assert IndexOptions(kind="ivf").resolved(200_000, 64).nlist == 447
    assert default_pq_m(512) == 64 and default_pq_m(48) == 12
    with pytest.raises(PairkitError, match="--pq-m must divide"):
        IndexOptions(kind="ivfpq", pq_m=5).resolved(10_000, 16)
    with pytest.raises(PairkitError, match="--index must be one of"):
        IndexOptions(kind="lsh").resolved(10, 4)
    with pytest.raises(PairkitError, match="--hnsw-m must be >= 2, got 1"):  # FAISS crashed
        IndexOptions(kind="hnsw", hnsw_m=1).resolved(100, 4)
    with pytest.raises(PairkitError, match="ivfpq index needs at least 1000 rows"):
        build_index(clustered(200, 8), IndexOptions(kind="ivfpq").resolved(200, 8))


def test_device_decides_where_faiss_searches(monkeypatch: pytest.MonkeyPatch, data) -> None:
    """--device: auto = the GPUs FAISS sees (else the CPU), cuda = all GPUs, cuda:N = GPU N,
    cpu = the CPU; a GPU that isn't there is an error (exit 1), a bad spelling bad usage."""
    from pairkit.errors import UsageError
    from pairkit.index import backend as backend_mod
    from pairkit.index import faiss_build as build_mod
    from tests.index.test_search import GpuFakeIndex

    x, _ = data
    placed: list[str] = []

    def fake_to_gpu(index, float16=False, device="cuda"):  # noqa: ANN001, ANN202
        placed.append(device)
        return GpuFakeIndex(index)

    monkeypatch.setattr(backend_mod, "torch_cuda_devices", lambda: 0)
    monkeypatch.setattr(backend_mod, "faiss_gpus", lambda: 0)
    assert not open_searcher(x, IndexOptions(kind="flat", device="auto")).gpu
    with pytest.raises(PairkitError, match="FAISS sees no GPU"):
        open_searcher(x, IndexOptions(kind="flat", device="cuda"))
    with pytest.raises(UsageError, match="--device must be auto, cpu, cuda or cuda:N"):
        open_searcher(x, IndexOptions(kind="flat", device="gpu"))
    monkeypatch.setattr(backend_mod, "faiss_gpus", lambda: 2)
    monkeypatch.setattr(build_mod, "to_gpu", fake_to_gpu)
    for device in ("auto", "cuda", "cuda:1"):
        assert open_searcher(x, IndexOptions(kind="flat", device=device)).gpu
    assert placed == ["cuda", "cuda", "cuda:1"]
    assert not open_searcher(x, IndexOptions(kind="flat", device="cpu")).gpu
    with pytest.raises(PairkitError, match="cuda:2"):
        open_searcher(x, IndexOptions(kind="flat", device="cuda:2"))


def test_save_load_tied_to_store_rows(tmp_path: Path) -> None:
    store = random_store(tmp_path / "s", n_sources=200, views=2, dim=8)
    x = store.vectors(np.float32)
    spec = IndexOptions(kind="hnsw").resolved(store.count, store.dim)
    built = build_index(x, spec)
    path = save_index(built, spec, store.root, store.content_id, store.count, store.dim)
    meta = json.loads(index_paths(store.root, "hnsw")[1].read_text())
    assert path.is_file() and meta["content_id"] == store.content_id
    loaded = load_index(store.root, "hnsw", store.content_id, store.count)
    assert loaded is not None and loaded[1].ef_search == 128
    np.testing.assert_array_equal(knn_search(x, loaded[0], 5)[1], knn_search(x, built, 5)[1])
    # open_searcher reuses it, with a search-time override
    p = open_searcher(x, IndexOptions(kind="hnsw", ef_search=64, device="cpu"),
                      store_root=store.root, content_id=store.content_id)
    assert p.origin == str(path) and p.options.ef_search == 64
    import faiss

    assert faiss.downcast_index(p.cpu_index).hnsw.efSearch == 64  # applied, not only said
    ivf = IndexOptions(kind="ivf", nlist=4, nprobe=1).resolved(store.count, store.dim)
    save_index(build_index(x, ivf), ivf, store.root, store.content_id, store.count, store.dim)
    p = open_searcher(x, IndexOptions(kind="ivf", nprobe=3, device="cpu"),
                      store_root=store.root, content_id=store.content_id)
    assert p.origin.endswith(index_paths(store.root, "ivf")[0].name)
    assert faiss.extract_index_ivf(p.cpu_index).nprobe == 3
    # other rows: never reused
    assert load_index(store.root, "hnsw", "0" * 16, store.count) is None
    with pytest.raises(PairkitError, match="exists; pass --force"):
        save_index(built, spec, store.root, store.content_id, store.count, store.dim)


def test_stale_index_after_store_rewrite_is_not_used(tmp_path: Path) -> None:
    from pairkit.core.store_writer import write_store

    store = random_store(tmp_path / "s", n_sources=200, views=2, dim=8)
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(store.root), "--index", "ivf", "-q"])
    assert r.exit_code == 0, r.output
    assert index_paths(store.root, "ivf")[0].is_file()
    # rewrite the store with other vectors in place (same folder)
    new = write_store(store.root, np.random.default_rng(9).normal(size=(400, 8)),
                      store.items.drop(columns=["id"]), force=True, dtype="float32")
    assert new.content_id != store.content_id
    x = new.vectors(np.float32)
    assert load_index(new.root, "ivf", new.content_id, new.count) is None
    p = open_searcher(x, IndexOptions(kind="ivf", device="cpu"), store_root=new.root,
                      content_id=new.content_id)
    assert p.origin == "built"


def test_index_cli(tmp_path: Path) -> None:
    store = random_store(tmp_path / "s", n_sources=100, views=2, dim=8)
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(store.root)])
    assert r.exit_code == 0, r.output
    assert "flat" in r.output and "exact" in r.output
    fpath = index_paths(store.root, "flat")[0]
    before = fpath.stat().st_mtime_ns
    # a rerun on an up-to-date store: a no-op with a message, exit 0, file untouched
    r = runner.invoke(app, ["index", str(store.root)])
    assert r.exit_code == 0 and "is up to date" in r.output and "nothing to do" in r.output
    assert fpath.stat().st_mtime_ns == before
    r = runner.invoke(app, ["index", str(store.root), "--index", "hnsw"])
    assert r.exit_code == 0 and index_paths(store.root, "hnsw")[0].is_file()
    # the same kind with other options: replaced only with --force
    r = runner.invoke(app, ["index", str(store.root), "--index", "hnsw", "--ef-search", "64"])
    assert r.exit_code == 1 and "exists with other options" in r.output
    assert "pass --force" in r.output
    r = runner.invoke(app, ["index", str(store.root), "--index", "hnsw", "--ef-search", "64",
                            "--force"])
    assert r.exit_code == 0 and "built hnsw(M=32, ef_search=64)" in r.output
    r = runner.invoke(app, ["index", str(store.root), "--index", "lsh"])
    assert r.exit_code == 2 and "'lsh' is not one of" in r.output
    r = runner.invoke(app, ["index", str(store.root), "--kind", "ivf"])
    assert r.exit_code == 2 and "--kind was replaced: use --index" in r.output
    r = runner.invoke(app, ["index", str(tmp_path / "missing")])
    assert r.exit_code == 1 and "not found" in r.output


def test_gpu_placement_path_on_cpu(monkeypatch: pytest.MonkeyPatch, data) -> None:
    """CPU twin of FAISS GPU placement: open_searcher with a GPU 'seen' clones the index
    with to_gpu (here a stand-in that refuses k > 2048 like FAISS GPU indices), keeps the
    CPU index for deep searches, and returns the same neighbours as the CPU path."""
    from pairkit.index import faiss_build as build_mod
    from tests.index.test_search import GpuFakeIndex

    x, ref = data
    calls: list[bool] = []

    from pairkit.index import backend as backend_mod

    def fake_to_gpu(index, float16=False, device="cuda"):  # noqa: ANN001, ANN202
        calls.append(float16)
        return GpuFakeIndex(index)

    monkeypatch.setattr(backend_mod, "faiss_gpus", lambda: 1)
    monkeypatch.setattr(build_mod, "to_gpu", fake_to_gpu)
    loaded = open_searcher(x, IndexOptions(kind="auto"))
    assert loaded.gpu and "on GPU" in loaded.describe() and calls == [False]
    search = loaded.search
    _, ids = search(x, 10)
    assert recall(ids, ref) == 1.0
    _, deep = search(x[:3], 2100)  # past the GPU k limit: the kept CPU index answers
    np.testing.assert_array_equal(deep[:, :10], ref[:3])
    # float16 on GPU is the cloner's job: the CPU index stays float32
    loaded16 = open_searcher(x, IndexOptions(kind="flat", float16=True))
    assert calls[-1] is True and "Gpu" in type(loaded16.index).__name__
    assert type(loaded16.cpu_index).__name__ == "IndexFlatIP"


def test_dedup_gpu_search_path_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU twin of dedup's GPU path (kNN with k capped at 2048, queries with k hits
    re-searched exactly on the CPU): same pairs as the CPU range search."""
    from pairkit.index import backend as backend_mod
    from pairkit.index import faiss_build
    from pairkit.index import range_search as rs
    from tests.index.test_search import GpuFakeIndex

    x = clustered(600, 8)
    x[300:310] = x[0]  # one big exact-duplicate group reaches past small k
    monkeypatch.setattr(backend_mod, "faiss_gpus", lambda: 1)
    monkeypatch.setattr(faiss_build, "to_gpu",
                        lambda index, float16=False, device="cuda": GpuFakeIndex(index))

    def pairs(device: str, k: int) -> set[tuple[int, int]]:
        rows, ids, _ = rs.range_search(x, x, 0.9, device=device, k=k)
        return set(zip(rows.tolist(), ids.tolist(), strict=True))

    on_gpu = pairs("cuda", 4)
    assert len(on_gpu) > 100 and on_gpu == pairs("cpu", 64)


def test_a_small_ivf_trains_without_faiss_raw_warning(capfd) -> None:
    """FAISS printed "WARNING clustering 200 points to 100 centroids: please provide at
    least 3900 training points" on stderr for any small store with its cells: pairkit's
    cells are its own choice (default_nlist keeps 39 rows per cell; --nlist is the user's)."""
    x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for n in (200, 1):
        index = build_index(x[:n], IndexOptions(kind="ivf", nlist=100).resolved(n, 8))
        assert index.ntotal == n
    assert "WARNING" not in capfd.readouterr().err


def test_an_ivfpq_float16_index_is_described_as_what_it_stores(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data) -> None:  # noqa: ANN001
    """Found by a bug hunt (2026-12-07): ``index --index ivfpq --dtype float16`` and a
    search over it on the CPU said ``ivfpq(..., float16)``, but the CPU index holds the
    same PQ codes (m bytes a row, float32 lookup tables) with either dtype: float16 is
    only the GPU copy's lookup tables (FAISS's ``useFloat16`` for IVFPQ)."""
    x, _ = data
    opts = IndexOptions(kind="ivfpq", float16=True, device="cpu")
    cpu = open_searcher(x, opts)
    assert type(cpu.index).__name__ == "IndexIVFPQ"
    assert "float16" not in cpu.describe()  # 'ivfpq(nlist=39, nprobe=8, m=4, float16)'
    assert cpu.describe().startswith("ivfpq(nlist=")
    assert "float16" in open_searcher(x, IndexOptions(kind="flat", float16=True,
                                                      device="cpu")).describe()
    store = random_store(tmp_path / "s", n_sources=600, views=2)
    r = CliRunner().invoke(app, ["index", str(store.root), "--index", "ivfpq",
                                 "--dtype", "float16"])
    assert r.exit_code == 0, r.output
    assert ", float16 lookup tables on the GPU)" in r.output, r.output
    from pairkit.index import backend as backend_mod
    from pairkit.index import faiss_build as build_mod
    from tests.index.test_search import GpuFakeIndex

    monkeypatch.setattr(backend_mod, "faiss_gpus", lambda: 1)
    monkeypatch.setattr(build_mod, "to_gpu", lambda index, float16=False, device="cuda":
                        GpuFakeIndex(index))
    gpu = open_searcher(x, IndexOptions(kind="ivfpq", float16=True))
    assert gpu.gpu and ", float16 lookup tables) on GPU" in gpu.describe()
