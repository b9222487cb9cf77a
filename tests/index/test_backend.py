"""--backend / --device resolution, and every search path on the torch backend (CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.errors import PairkitError, UsageError
from pairkit.index import backend as backend_mod
from pairkit.index.backend import SearchBackend, cuda_possible, resolve_backend
from pairkit.index.open import exact_searcher, open_searcher
from pairkit.index.options import IndexOptions
from pairkit.index.search import knn_search
from pairkit.index.torch_search import TorchFlatIndex
from tests.index.test_torch_search import clustered


def _gpus(monkeypatch: pytest.MonkeyPatch, faiss: int, torch: int) -> None:
    monkeypatch.setattr(backend_mod, "faiss_gpus", lambda: faiss)
    monkeypatch.setattr(backend_mod, "torch_cuda_devices", lambda: torch)


@pytest.mark.parametrize(
    ("faiss", "torch", "backend", "device", "want"),
    [
        (0, 0, "auto", "auto", ("faiss", "cpu")),
        (0, 0, "torch", "auto", ("torch", "cpu")),
        (0, 0, "torch", "cpu", ("torch", "cpu")),
        (0, 0, "faiss", "auto", ("faiss", "cpu")),
        (1, 1, "auto", "cpu", ("faiss", "cpu")),
        (0, 1, "auto", "auto", ("torch", "cuda")),  # faiss-cpu on a GPU host
        (0, 2, "auto", "cuda:1", ("torch", "cuda:1")),
        (1, 1, "auto", "auto", ("faiss", "cuda")),  # faiss-gpu works: FAISS GPU indices
        (1, 1, "torch", "auto", ("torch", "cuda")),
        (2, 2, "faiss", "cuda:1", ("faiss", "cuda:1")),
        (0, 1, "faiss", "auto", ("faiss", "cpu")),
    ],
)
def test_resolution(monkeypatch: pytest.MonkeyPatch, faiss: int, torch: int, backend: str,
                    device: str, want: tuple[str, str]) -> None:
    _gpus(monkeypatch, faiss, torch)
    got = resolve_backend(backend, device)
    assert (got.name, got.device) == want


@pytest.mark.parametrize(
    ("faiss", "torch", "backend", "device", "message"),
    [
        (0, 0, "auto", "cuda", "--device cuda: FAISS sees no GPU and torch sees none"),
        (0, 1, "faiss", "cuda", "--backend faiss --device cuda: FAISS sees no GPU"),
        (0, 1, "auto", "cuda:3", "--device cuda:3: only 1 GPU(s) visible"),
        # cuda:N names the (N+1)-th GPU: cuda:1 with one GPU is refused, not used
        (0, 1, "auto", "cuda:1", "--device cuda:1: only 1 GPU(s) visible"),
        (1, 0, "faiss", "cuda:1", "--backend faiss --device cuda:1: FAISS sees only 1 GPU(s)"),
    ],
)
def test_impossible_requests(monkeypatch: pytest.MonkeyPatch, faiss: int, torch: int,
                             backend: str, device: str, message: str) -> None:
    _gpus(monkeypatch, faiss, torch)
    with pytest.raises(PairkitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_backend(backend, device)


def test_bad_words_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="--backend must be one of auto, faiss, torch"):
        resolve_backend("annoy", "auto")
    with pytest.raises(UsageError, match="--device must be auto, cpu, cuda or cuda:N"):
        resolve_backend("auto", "tpu")
    with pytest.raises(UsageError, match="--device must be"):
        resolve_backend("auto", "cuda:x")


def test_no_gpu_check_without_nvidia_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cuda_possible() is False
    assert backend_mod.torch_cuda_devices() == 0
    # on a host with NVIDIA device files: "-1" (the other spelling of "none") hides them too
    monkeypatch.setattr(backend_mod.os.path, "exists", lambda p: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert cuda_possible() is False
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert cuda_possible() is True


def test_prepare_index_torch_backend_is_exact() -> None:
    x = clustered(3000, 32, seed=1)
    torch_loaded = open_searcher(x, IndexOptions(kind="auto", backend="torch", device="cpu"))
    assert isinstance(torch_loaded.index, TorchFlatIndex)
    assert torch_loaded.options.kind == "flat" and torch_loaded.engine.name == "torch"
    assert "(torch)" in torch_loaded.describe()
    faiss_loaded = open_searcher(x, IndexOptions(kind="flat", backend="faiss", device="cpu"))
    s1, i1 = torch_loaded.search(x[:500], 12)
    s2, i2 = faiss_loaded.search(x[:500], 12)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, atol=1e-6)
    with pytest.raises(UsageError, match="the torch backend searches exactly"):
        open_searcher(x, IndexOptions(kind="ivf", backend="torch", device="cpu"))


def test_prepare_index_device_cpu() -> None:
    loaded = open_searcher(clustered(100, 8), IndexOptions(kind="flat", device="cpu"))
    assert loaded.engine == SearchBackend("faiss", "cpu", "", auto=True)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_auto_gives_way_to_faiss_for_approximate_kinds(monkeypatch: pytest.MonkeyPatch,
                                                       kind: str) -> None:
    """faiss-cpu on a GPU host: --backend auto is the torch search, but an IVF or HNSW
    index asked for by name runs in FAISS on the CPU (not a usage error); --backend
    torch keeps refusing it, and exact kinds stay on the torch search."""
    _gpus(monkeypatch, 0, 1)
    x = clustered(2000, 16, seed=4)
    loaded = open_searcher(x, IndexOptions(kind=kind, nprobe=64),
                           engine=resolve_backend("auto", "auto"))
    assert loaded.engine.name == "faiss" and loaded.engine.device == "cpu"
    assert "FAISS sees no GPU" in loaded.engine.reason
    for exact in ("flat", "auto"):
        assert backend_mod.for_index_kind(resolve_backend("auto", "auto"), exact).name == "torch"
    with pytest.raises(UsageError, match="the torch backend searches exactly"):
        open_searcher(x, IndexOptions(kind=kind), engine=resolve_backend("torch", "cpu"))


def test_exact_index_and_knn_search_on_torch() -> None:
    x = clustered(800, 16, seed=2)
    index = exact_searcher(x, SearchBackend("torch", "cpu")).index
    s, i = knn_search(x[:100], index, 20, batch_size=7)
    ref_s, ref_i = knn_search(x[:100], x, 20)
    np.testing.assert_array_equal(i, ref_i)
    np.testing.assert_allclose(s, ref_s, atol=1e-6)


# -- every command's search on the torch backend gives FAISS's results ------------------
def test_mine_same_pairs_on_torch(tmp_path) -> None:  # noqa: ANN001
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from tests.conftest import random_store

    store = random_store(tmp_path / "s", n_sources=150, views=2, dim=16, classes=6)
    cfg = MineConfig(num_negatives=4, hard=True)
    fn = FalseNegativeConfig(rules=("near-duplicate", "community"))
    a, sa = mine_store(store, None, cfg, IndexOptions(kind="flat", backend="faiss",
                                                     device="cpu"), fn)
    b, sb = mine_store(store, None, cfg, IndexOptions(backend="torch", device="cpu"), fn)
    scores = ["pos_score", "neg_score"]
    assert a.drop(columns=scores).equals(b.drop(columns=scores))
    np.testing.assert_allclose(a[scores].to_numpy(), b[scores].to_numpy(), atol=1e-6)
    assert "(torch)" in sb["index"] and sb["seconds"]["search"] > 0
    assert sa["fn_flagged"] == sb["fn_flagged"]


def test_eval_same_metrics_on_torch() -> None:
    from pairkit.eval.run import EvalConfig, evaluate
    from tests.eval.test_run import eval_side

    q, r = eval_side(1, 90, prefix="q"), eval_side(2, 300, prefix="r")
    base = dict(knn_ks=(3, 10), recall_ks=(1, 4), metrics=("knn", "retrieval", "geometry"))
    on_faiss = evaluate(q, r, EvalConfig(backend="faiss", **base)).metrics
    on_torch = evaluate(q, r, EvalConfig(backend="torch", **base)).metrics
    assert on_faiss == on_torch


def test_near_duplicates_and_clusters_on_torch() -> None:
    from pairkit.mine.clusters import knn_graph
    from pairkit.mine.near_duplicates import find_near_duplicates

    x = clustered(700, 16, seed=3)
    x[500:505] = x[3] + 1e-4
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    a = find_near_duplicates(x, 0.95, backend="faiss", device="cpu")
    b = find_near_duplicates(x, 0.95, backend="torch", device="cpu")
    np.testing.assert_array_equal(a.item_group, b.item_group)
    assert (a.item_group >= 0).sum() >= 6
    src = np.arange(700) // 2
    x = clustered(700, 16, seed=4)  # no planted copies: no ties within float rounding
    ids_f, s_f = knn_graph(x, src, 8)
    ids_t, s_t = knn_graph(x, src, 8, backend=SearchBackend("torch", "cpu"))
    np.testing.assert_array_equal(ids_f, ids_t)
    np.testing.assert_allclose(s_f, s_t, atol=1e-6)
