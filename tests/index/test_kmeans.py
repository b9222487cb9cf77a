"""Spherical k-means in torch (CPU here) against the numpy one of pairkit.mine.clusters."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.index.backend import SearchBackend
from pairkit.index.kmeans import kmeanspp, spherical_kmeans, torch_spherical_kmeans

TORCH_CPU = SearchBackend("torch", "cpu")


def _clusters(n: int, d: int, centres: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centres, d))
    x = c[rng.integers(0, centres, n)] + 0.35 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def objective(x: np.ndarray, assign: np.ndarray, centroids: np.ndarray) -> float:
    """Mean similarity of each row to its centroid (what spherical k-means maximises)."""
    return float(np.mean(np.einsum("nd,nd->n", x, centroids[assign])))


@pytest.mark.parametrize(("n", "k", "centres"), [(3000, 20, 10), (4000, 64, 32), (3000, 30, 200)])
def test_same_objective_as_numpy(n: int, k: int, centres: int) -> None:
    """Both find local optima: over four seeds the mean objectives agree within 2%."""
    x = _clusters(n, 32, centres, 0)
    o_f, o_t = [], []
    for seed in range(4):
        a_f, c_f = spherical_kmeans(x, k, seed=seed, niter=20)
        a_t, c_t = spherical_kmeans(x, k, seed=seed, niter=20, backend=TORCH_CPU)
        assert c_t.shape == c_f.shape and a_t.shape == (n,)
        np.testing.assert_allclose(np.linalg.norm(c_t, axis=1), 1.0, atol=1e-5)
        o_f.append(objective(x, a_f, c_f))
        o_t.append(objective(x, a_t, c_t))
    assert abs(np.mean(o_t) - np.mean(o_f)) <= 0.02 * np.mean(o_f), (o_t, o_f)


def test_assignment_is_the_exact_best_centroid_and_reproducible() -> None:
    x = _clusters(2000, 16, 10, 3)
    a, c = torch_spherical_kmeans(x, 12, seed=5, niter=8)
    s = x.astype(np.float64) @ c.astype(np.float64).T
    np.testing.assert_array_equal(a, np.argmax(s, axis=1))
    a2, c2 = torch_spherical_kmeans(x, 12, seed=5, niter=8)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(c, c2)
    a3, _ = torch_spherical_kmeans(x, 12, seed=6, niter=8)
    assert not np.array_equal(a, a3)


def test_training_sample_is_bounded() -> None:
    x = _clusters(5000, 8, 4, 4)
    a, c = torch_spherical_kmeans(x, 4, seed=0, niter=5, max_points_per_centroid=50)
    assert a.shape == (5000,) and c.shape == (4, 8)  # trained on 200 rows, all assigned
    assert len(np.unique(a)) == 4


def test_kmeanspp_seeds_spread_out() -> None:
    """Six tight, far-apart blobs: k-means++ puts one seed in each (a uniform start
    would put two in one blob about 98% of the time)."""
    import torch

    rng = np.random.default_rng(5)
    centres = np.linalg.qr(rng.normal(size=(16, 16)))[0][:6]  # orthonormal: cos 0
    label = rng.integers(0, 6, 3000)
    x = centres[label] + 0.05 * rng.normal(size=(3000, 16))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    for seed in range(3):
        seeds = kmeanspp(torch.from_numpy(x), 6, torch.Generator().manual_seed(seed)).numpy()
        blob_of_seed = np.argmax(seeds @ centres.T, axis=1)
        assert sorted(blob_of_seed.tolist()) == list(range(6))


def test_empty_cluster_is_reseeded() -> None:
    x = np.repeat(_clusters(3, 8, 3, 6), 50, axis=0)  # three points, 50 copies each
    a, c = torch_spherical_kmeans(x, 5, seed=1, niter=5)
    assert c.shape == (5, 8) and np.isfinite(c).all()
    assert len(np.unique(a)) == 3  # copies can't be split further


def test_small_inputs() -> None:
    x = _clusters(5, 4, 2, 0)
    a, c = spherical_kmeans(x, 10, seed=0, backend=TORCH_CPU)
    assert c.shape == (5, 4) and sorted(a.tolist()) == [0, 1, 2, 3, 4]
    a, c = spherical_kmeans(x[:0], 3, backend=TORCH_CPU)
    assert a.shape == (0,)


def test_numpy_kmeans_ends_at_a_lloyd_fixed_point() -> None:
    """The numpy path's result is converged Lloyd: every row on its centroid of highest
    cosine, every centroid the normalised mean of its rows (run to convergence within
    niter), and the cluster ids cover 0..k-1."""
    x = _clusters(600, 8, 6, 11)
    a, c = spherical_kmeans(x, 6, seed=2, niter=100)
    np.testing.assert_array_equal(a, np.argmax(x @ c.T, axis=1))
    assert sorted(set(a.tolist())) == list(range(6))
    for j in range(6):
        mean = x[a == j].astype(np.float64).sum(axis=0)
        np.testing.assert_allclose(c[j], mean / np.linalg.norm(mean), atol=1e-5)


@pytest.mark.parametrize("backend", [None, TORCH_CPU])
def test_one_cluster_is_the_normalised_mean(backend) -> None:  # noqa: ANN001
    x = _clusters(50, 4, 3, 1)
    a, c = spherical_kmeans(x, 1, seed=0, backend=backend)
    mean = x.astype(np.float64).mean(axis=0)
    assert a.tolist() == [0] * 50 and c.shape == (1, 4)
    np.testing.assert_allclose(c[0], mean / np.linalg.norm(mean), atol=1e-6)
