"""pairkit.mine.whitening against hand-computed spectra and an SVD reference."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.mine.whitening import fit_whitening


def reference_whitened(x: np.ndarray, power: float = 0.25, variance: float = 0.99,
                       max_dims: int = 512) -> np.ndarray:
    """Partial PCA whitening by an SVD of the centred rows (independent of the eigh of the
    covariance that pairkit.mine.whitening uses), rows re-normalised."""
    c = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    _, sv, vt = np.linalg.svd(c, full_matrices=False)
    eig = sv**2 / (len(x) - 1)
    share = np.cumsum(eig) / eig.sum()
    dims = min(int(np.argmax(share >= variance - 1e-12)) + 1, max_dims)
    z = c @ vt[:dims].T * eig[:dims] ** -power
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def test_axis_aligned_spectrum_by_hand() -> None:
    # variances 16, 4, 1 on three axes (rows: +-4, +-2, +-1 on one axis each)
    x = np.zeros((6, 3))
    x[0, 0], x[1, 0], x[2, 1], x[3, 1], x[4, 2], x[5, 2] = 4, -4, 2, -2, 1, -1
    w = fit_whitening(x, power=0.25, variance=1.0)
    var = np.array([32, 8, 2]) / 5.0  # sum of squares / (n - 1)
    assert w.dims == 3
    np.testing.assert_allclose(np.abs(w.components), np.eye(3), atol=1e-6)
    # eigenvalue ** -1/4, relative to the leading one
    np.testing.assert_allclose(w.scale, (var / var[0]) ** -0.25, rtol=1e-5)
    z = w.apply(x)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-6)
    # variance share: 32/42 = 0.76, 40/42 = 0.95 -> 0.9 keeps two components
    assert fit_whitening(x, variance=0.9).dims == 2
    assert fit_whitening(x, variance=0.7).dims == 1
    assert fit_whitening(x, variance=1.0, max_dims=2).dims == 2


def test_full_power_whitens_the_covariance() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)) @ rng.normal(size=(6, 6)) + 3.0
    w = fit_whitening(x, power=0.5, variance=1.0)
    z = (x - w.mean) @ (w.components * w.scale)
    cov = np.cov(z.T)
    np.testing.assert_allclose(cov / cov[0, 0], np.eye(6), atol=1e-4)


def test_matches_an_svd_reference_on_a_sample() -> None:
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(300, 20)) / np.arange(1, 21)).astype(np.float32)
    w = fit_whitening(x, power=0.25, variance=0.95)
    c = x.astype(np.float64) - x.mean(axis=0)
    _, sv, vt = np.linalg.svd(c, full_matrices=False)
    eig = sv**2 / (len(x) - 1)
    dims = int(np.argmax(np.cumsum(eig) / eig.sum() >= 0.95)) + 1
    ref = c @ vt[:dims].T * eig[:dims] ** -0.25
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    got = w.apply(x)
    assert w.dims == dims
    # components have a sign freedom: compare the cosine matrices
    np.testing.assert_allclose(got @ got.T, ref @ ref.T, atol=1e-4)
    # blocked application equals one block
    np.testing.assert_allclose(w.apply(x, block=7), got, atol=1e-6)
    np.testing.assert_allclose(w.apply(x, dims=3), got[:, :3] / np.linalg.norm(
        got[:, :3], axis=1, keepdims=True), atol=1e-5)


def test_degenerate_and_bad_values() -> None:
    same = np.ones((5, 4), np.float32)
    w = fit_whitening(same)
    assert w.dims == 1 and np.isfinite(w.apply(same)).all()
    for bad in ({"power": 0.6}, {"power": -0.1}, {"variance": 0.0}, {"variance": 1.5}):
        with pytest.raises(ValueError):
            fit_whitening(same, **bad)


def test_float32_solve_matches_a_float64_svd_on_many_dimensions() -> None:
    """The float32 path (a well-conditioned spectrum on 128 dimensions): scales and the
    whitened cosines as the float64 SVD reference; the kept tail is above the floor."""
    from pairkit.mine.whitening import FLOAT32_FLOOR

    rng = np.random.default_rng(2)
    x = (rng.normal(size=(500, 128)) / np.linspace(1, 20, 128)).astype(np.float32)
    w = fit_whitening(x, power=0.25, variance=0.99)
    ref = reference_whitened(x, 0.25, 0.99)
    assert w.dims == ref.shape[1]
    c = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    eig = np.linalg.svd(c, compute_uv=False) ** 2 / (len(x) - 1)
    assert eig[w.dims - 1] >= FLOAT32_FLOOR * eig[0]  # the float32 solve was used
    np.testing.assert_allclose(w.scale, (eig[: w.dims] / eig[0]) ** -0.25, rtol=1e-4)
    got = w.apply(x)
    np.testing.assert_allclose(got @ got.T, ref @ ref.T, atol=2e-5)


def test_a_tail_below_the_float32_floor_is_solved_in_float64() -> None:
    """Variances spanning 1e5 (kept eigenvalues down to 1e-5 of the largest): float32
    would get the smallest wrong by ~1%; the float64 solve matches the SVD to 1e-6."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2000, 12)) * np.logspace(0, -2.5, 12)  # variances 1 .. 1e-5
    w = fit_whitening(x, power=0.5, variance=1.0)
    c = x - x.mean(axis=0)
    eig = np.linalg.svd(c, compute_uv=False) ** 2 / (len(x) - 1)
    assert w.dims == 12
    np.testing.assert_allclose(w.scale, (eig / eig[0]) ** -0.5, rtol=1e-6)
    ref = reference_whitened(x, 0.5, 1.0)
    got = w.apply(x)
    np.testing.assert_allclose(got @ got.T, ref @ ref.T, atol=1e-5)



@pytest.mark.parametrize(("dim", "kind"), [(24, "flat"), (24, "ivf"), (24, "ivf-lists"),
                                           (160, "flat"), (160, "ivf-lists")])
def test_lists_from_rows_whitened_when_read_equal_the_array(monkeypatch, dim, kind) -> None:
    # mine's whitened lists from rows whitened as they are read (index built block by
    # block, searched block by block) against the same search of the whole whitened array,
    # and, exact, against brute force; 160 dims: candidates from the first 128 components;
    # ivf-lists: cells long enough for the list-major HalfIvf, which keeps only the ids of
    # the whitened rows and whitens a cell's rows again when it scans it (CellRows)
    from pairkit.core.row_view import RowView
    from pairkit.index import half_ivf
    from pairkit.index.backend import CPU
    from pairkit.index.options import IndexOptions
    from pairkit.mine import rules_run
    from pairkit.mine.whitening import whitened_neighbours

    monkeypatch.setattr(rules_run, "LIST_QUERY_BLOCK", 333)
    monkeypatch.setattr("pairkit.mine.whitening.WHITEN_ONCE_BYTES", 0)  # whitened when read
    built = []
    real_build = half_ivf.build_half_ivf
    monkeypatch.setattr(half_ivf, "build_half_ivf",
                        lambda *a: built.append(real_build(*a)) or built[-1])
    rng = np.random.default_rng(4)
    centers = rng.normal(size=(8, dim))
    x = centers[rng.integers(0, 8, 1500)] + 0.7 * rng.normal(size=(1500, dim))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    sources = np.arange(1500) // 2  # two views per source
    nlist = {"ivf": 6, "ivf-lists": 4}.get(kind)
    options = IndexOptions(kind=kind.split("-")[0], nlist=nlist, nprobe=2, seed=0)
    seen = []

    def search(space, k):
        seen.append(type(space))
        return rules_run.search_neighbour_lists(space, sources, k, options, CPU, None)

    lazy = whitened_neighbours(x, 10, search, on_demand=True)
    whole = whitened_neighbours(x, 10, search)
    assert seen == [RowView, np.ndarray]
    if kind == "ivf-lists":
        assert len(built) == 1 and isinstance(built[0].codes, half_ivf.CellRows)
    else:
        assert built == []
    np.testing.assert_array_equal(lazy[0], whole[0])
    np.testing.assert_allclose(lazy[1], whole[1], atol=1e-6)
    if kind == "flat" and dim <= 128:
        white = fit_whitening(x)
        z = white.apply(x)
        sims = z @ z.T
        sims[sources[:, None] == sources[None, :]] = -np.inf
        want = np.argsort(-sims, axis=1, kind="stable")[:, :10]
        assert (lazy[0] == want).mean() > 0.999  # ties aside


def test_whitened_once_when_small_and_when_read_when_big(monkeypatch):
    """``on_demand`` whitens a small store's rows once (an array: the index reading them
    again and again cost 0.7 s of 5.8 at 8,000 x 1,280) and a big one's when read (no
    (N, dims) array beside the index), the bound being the array's bytes; both give the
    same lists (the test above)."""
    from pairkit.core.row_view import RowView
    from pairkit.mine import whitening

    rng = np.random.default_rng(5)
    x = rng.normal(size=(300, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    seen = []

    def search(space, k):
        seen.append(type(space))
        z = np.asarray(space[:], dtype=np.float32)
        sims = z @ z.T
        np.fill_diagonal(sims, -np.inf)
        ids = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return ids, np.take_along_axis(sims, ids, axis=1)

    size = 300 * whitening.fit_whitening(x).dims * 4
    monkeypatch.setattr(whitening, "WHITEN_ONCE_BYTES", size)
    small = whitening.whitened_neighbours(x, 5, search, on_demand=True)
    monkeypatch.setattr(whitening, "WHITEN_ONCE_BYTES", size - 1)
    big = whitening.whitened_neighbours(x, 5, search, on_demand=True)
    assert seen == [np.ndarray, RowView]
    np.testing.assert_array_equal(small[0], big[0])


def test_whitened_neighbours_scores_are_the_plain_cosines() -> None:
    """The neighbours are found in the whitened space, but their scores are the plain
    cosines of the input rows (the docstring's promise), not the whitened ones."""
    from pairkit.mine.whitening import whitened_neighbours

    rng = np.random.default_rng(0)
    v = rng.standard_normal((60, 8)) * np.array([1, 0.3, 0.1, 0.1, 0.05, 0.05, 0.02, 0.02])
    v = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def search(space, k):  # noqa: ANN001, ANN202 (brute force, one source per row)
        s = np.asarray(space, np.float64) @ np.asarray(space, np.float64).T
        np.fill_diagonal(s, -np.inf)
        ids = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return ids, np.take_along_axis(s, ids, axis=1).astype(np.float32)

    ids, s = whitened_neighbours(v, 3, search, power=0.25)
    assert ids.shape == (60, 3) and (ids >= 0).all()
    plain = np.einsum("ij,ikj->ik", v.astype(np.float64), v[ids].astype(np.float64))
    np.testing.assert_allclose(s, plain, atol=1e-6)
    w = fit_whitening(v, power=0.25).apply(v).astype(np.float64)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    whitened = np.einsum("ij,ikj->ik", w, w[ids])
    assert np.abs(whitened - plain).max() > 1e-3  # the two differ here
