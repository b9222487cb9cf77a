"""eval --plot --map pca,umap: the UMAP map beside PCA, the install hint without umap-learn."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.eval.plots import UMAP_HINT, cosine_knn, pca_2d, umap_2d
from tests.conftest import random_store

runner = CliRunner()


def eval_(*args: object):  # noqa: ANN201
    return runner.invoke(app, ["eval", *map(str, args), "-q", "--metrics", "knn"])


def _clusters(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = np.eye(16)[:2] * 10
    labels = np.arange(n) % 2
    x = centers[labels] + rng.normal(size=(n, 16))
    return x / np.linalg.norm(x, axis=1, keepdims=True), labels


def _nn_agreement(xy: np.ndarray, labels: np.ndarray) -> float:
    d = ((xy[:, None] - xy[None]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    return float((labels[d.argmin(1)] == labels).mean())


def test_umap_keeps_separate_clusters_apart_and_is_seeded() -> None:
    pytest.importorskip("umap")
    x, labels = _clusters()
    xy = umap_2d(x, seed=0)
    assert xy.shape == (40, 2) and np.isfinite(xy).all()
    assert _nn_agreement(xy, labels) == 1.0  # every point's 2-D neighbour is of its cluster
    np.testing.assert_allclose(umap_2d(x, seed=0), xy)
    assert _nn_agreement(pca_2d(x), labels) == 1.0  # the reference map agrees


def test_umaps_neighbours_are_the_brute_force_cosine_ones() -> None:
    """The kNN handed to umap-learn: each row's k nearest by cosine, itself first, as a
    full sort of the cosine distances gives them (a zero row at distance 1 from all)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 8)).astype(np.float32) * rng.uniform(0.1, 5, size=(60, 1))
    x[7] = 0
    ids, dist, index = cosine_knn(x, 6)
    assert index is None and ids.shape == dist.shape == (60, 6) and ids.dtype == np.int64
    unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
    full = 1 - unit.astype(np.float64) @ unit.T.astype(np.float64)
    np.fill_diagonal(full, 0)
    full[7, :] = full[:, 7] = 1.0
    full[7, 7] = 1.0
    for r in range(60):
        np.testing.assert_allclose(dist[r], np.sort(full[r])[:6], atol=1e-5)
        if r != 7:
            assert ids[r, 0] == r
            assert set(ids[r]) == set(np.argsort(full[r], kind="stable")[:6])


def test_eval_writes_both_maps(tmp_path: Path) -> None:
    pytest.importorskip("umap")
    st = random_store(tmp_path / "s", n_sources=30, views=2, dim=16)
    r = eval_(st.root, "--plot", tmp_path / "plots", "--map", "pca,umap")
    assert r.exit_code == 0, r.output
    for name in ("scores.png", "map.png", "umap.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    again = eval_(st.root, "--plot", tmp_path / "plots", "--map", "umap")
    assert again.exit_code == 1 and "pass --force" in again.output
    # the report shows them as it shows any eval plot
    r = runner.invoke(app, ["report", str(tmp_path / "plots"), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert f"{tmp_path / 'plots'}: 3 plots" in r.output
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "umap.png" in page and "map.png" in page


def test_without_umap_learn_the_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "umap" else real(name, *a))
    monkeypatch.setitem(sys.modules, "umap", None)
    st = random_store(tmp_path / "s")
    r = eval_(st.root, "--plot", tmp_path / "plots", "--map", "umap")
    assert r.exit_code == 1
    assert r.output.strip() == f"error: {UMAP_HINT}"
    assert not (tmp_path / "plots").exists()  # refused before any work
    from pairkit.errors import PairkitError

    with pytest.raises(PairkitError, match="pip install umap-learn"):
        umap_2d(np.eye(5))


@pytest.mark.parametrize("args, message", [
    (["--map", "tsne", "--plot", "p"], "--map must be a comma list of pca, umap"),
    (["--map", "umap"], "--map needs --plot"),
    # found by a bug hunt (2026-12-08): the map was drawn twice into the temp folder and
    # the second move ended in 'internal error: FileNotFoundError' (exit 1)
    (["--map", "pca,pca", "--plot", "p"], "--map lists pca twice"),
])
def test_bad_map_options(tmp_path: Path, args: list[str], message: str) -> None:
    st = random_store(tmp_path / "s")
    r = eval_(st.root, *args)
    assert r.exit_code == 2 and message in r.output
