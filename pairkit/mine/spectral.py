"""Spectral clustering of a store's kNN graph (what the ``cluster`` rule clusters in).

On real embeddings a class is often a curved, stretched region (a digit written
thin, thick, slanted), which k-means on the vectors cuts by style rather than by
class, while the kNN graph keeps the region connected. The leading eigenvectors
of the graph's normalised adjacency (Ng, Jordan & Weiss 2002; von Luxburg 2007,
"A tutorial on spectral clustering") map each such region to a tight blob that
k-means then finds. Measured on real images (docs/benchmarks.md): the adjusted
Rand index to the true classes of MNIST under an ImageNet CNN rose from 0.18-0.30
(k-means on the vectors) to 0.41-0.52.

- The graph: each row's ``m`` nearest rows of other sources, weights
  ``max(cos, 0)``, symmetrised (``max(W, W^T)``). Neighbours and cosines are
  taken in 128 components of the rows whitened by what their views differ by
  (:mod:`pairkit.mine.view_whitening`; the plain principal components for a
  store of one view per source): the graph only needs the neighbourhoods, and
  the search is 10x cheaper than in 1,280 dims.
- The number of clusters, when not given: how many eigenvalues of the normalised
  adjacency are >= 0.93 (:data:`EIGEN_THRESHOLD`), between 2 and
  :data:`MAX_CLUSTERS` (64: 32 eigenvectors first, more while all are above it).
  An eigenvalue near 1 marks a region the graph barely connects to the rest;
  counting them is the eigengap idea made robust to the absence of a single clear
  gap (measured, docs/methods.md: 8 on MNIST and 9 on Fashion-MNIST, 10 classes
  each; 16 on their union, 20 classes).
- Large stores: the graph and the embedding are built on a seeded sample of
  ``sample`` rows; every other row takes, per k-means run, the majority cluster of
  the nearest small cell of sampled rows (in the principal components).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pairkit.core.coded_rows import CodedRows, CodedRuns

EIGEN_THRESHOLD = 0.93
MAX_CLUSTERS = 64


@dataclass
class SpectralEmbedding:
    """Rows ``rows`` (sorted ids of the store) and ``x`` (len(rows), dims), the
    leading eigenvectors of the normalised adjacency; ``eigenvalues``, largest
    first; ``reduced``: every store row in the principal components (for the
    extension), computed when read (:func:`pairkit.mine.clusters.pca_rows`) or an
    array."""

    rows: np.ndarray
    x: np.ndarray
    eigenvalues: np.ndarray
    reduced: Any
    # per seed: the sample's small cells and each other row's nearest (:func:`_cells`)
    cells: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False)
    # per seed: every row's code in the extended runs' and coordinates' tables
    codes: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def cluster_count(self, threshold: float = EIGEN_THRESHOLD) -> int:
        """Eigenvalues >= ``threshold``, between 2 and the embedding's width."""
        count = int((self.eigenvalues >= threshold).sum())
        return int(min(max(count, 2), len(self.eigenvalues)))


def knn_graph_approx(reduced: Any, sources: np.ndarray, rows: np.ndarray, m: int,
                     *, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``rows``' ``m`` nearest other-source rows among ``rows``, by exact
    search in ``reduced`` (the rows' principal components; the graph's weights are
    these similarities). Returns ``(ids, scores)`` (len(rows), m), ids are positions
    in ``rows``, -1 / -inf padded."""
    from pairkit.index.outside import search_outside_parts
    from pairkit.index.search import knn_search
    from pairkit.mine.clusters import big_source_rows, own_source_widths, width_blocks

    z = np.ascontiguousarray(reduced[rows], dtype=np.float32)
    src = np.unique(np.asarray(sources)[rows], return_inverse=True)[1].ravel()
    n = len(rows)
    widths = own_source_widths(src, m)  # m + each row's own source, not the largest
    ids_out = np.full((n, m), -1, dtype=np.int64)
    sc_out = np.full((n, m), -np.inf, dtype=np.float32)
    for width, here in width_blocks(widths, block, big_source_rows(src)):
        if width == 0:  # a big source: the exact search skips it
            sc, cand = search_outside_parts(z, src, np.ascontiguousarray(z[here]), src[here],
                                            m, lambda a, b: knn_search(a, z, b))
        else:  # m + the row's own source deep
            sc, cand = knn_search(np.ascontiguousarray(z[here]), z, width)
        own = (cand < 0) | (src[np.maximum(cand, 0)] == src[here][:, None])
        order = np.argsort(own, axis=1, kind="stable")[:, :m]
        top_i = np.take_along_axis(np.where(own, -1, cand), order, 1)
        top_s = np.take_along_axis(np.where(own, -np.inf, sc), order, 1)
        ids_out[here, : top_i.shape[1]] = top_i
        sc_out[here, : top_s.shape[1]] = top_s
    return ids_out, sc_out


def spectral_embedding(vectors: np.ndarray, sources: np.ndarray, *, m: int = 15,
                       sample: int = 20_000, pca_dims: int = 128, n_eigen: int = MAX_CLUSTERS,
                       seed: int = 0, principal: Any = None) -> SpectralEmbedding:
    """The normalised-adjacency embedding of the kNN graph of (a sample of) the rows.

    Returns a :class:`SpectralEmbedding` with the ``n_eigen`` leading eigenvectors
    (fewer for tiny stores), rows normalised to unit length (NJW). The graph's space:
    :func:`pairkit.mine.view_whitening.view_whitened_rows` (``principal``: the rows'
    principal components, when already fitted).
    """
    from scipy import sparse

    from pairkit.mine.view_whitening import view_whitened_rows

    n = len(vectors)
    reduced = view_whitened_rows(vectors, sources, pca_dims, sample=5_000, seed=seed,
                                 principal=principal)
    rng = np.random.default_rng([seed, 23])
    rows = (np.arange(n) if n <= sample
            else np.sort(rng.choice(n, size=sample, replace=False)))
    s = len(rows)
    nb, w = knn_graph_approx(reduced, sources, rows, min(m, max(1, s - 1)))
    r = np.repeat(np.arange(s), nb.shape[1])
    c = nb.ravel()
    ok = c >= 0
    adj = sparse.csr_matrix((np.maximum(w.ravel()[ok], 0.0).astype(np.float64),
                             (r[ok], c[ok])), shape=(s, s))
    adj = adj.maximum(adj.T)
    deg = np.asarray(adj.sum(axis=1)).ravel()
    scale = sparse.diags(1.0 / np.sqrt(np.maximum(deg, 1e-12)))
    norm = (scale @ adj @ scale).tocsr()
    vals, vecs = _leading_eigen(norm, min(n_eigen, 32))
    while (vals >= EIGEN_THRESHOLD).all() and len(vals) < min(n_eigen, s - 2):
        vals, vecs = _leading_eigen(norm, min(n_eigen, 2 * len(vals)))  # more clusters
    return SpectralEmbedding(rows=rows, x=vecs.astype(np.float32), eigenvalues=vals,
                             reduced=reduced)


def _leading_eigen(norm: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues (descending) and eigenvectors of a symmetric
    sparse matrix; dense solver for tiny ones. The start vector is fixed, so the
    result is reproducible."""
    from scipy.sparse.linalg import eigsh

    s = norm.shape[0]
    k = int(min(k, max(1, s - 2)))
    if s < 64 or k >= s - 1:
        vals, vecs = np.linalg.eigh(norm.toarray())
    else:
        vals, vecs = eigsh(norm, k=k, which="LA", tol=1e-4, v0=np.ones(s))
    order = np.argsort(-vals, kind="stable")[:k]
    return vals[order], vecs[:, order]


def diffusion_weights(eigenvalues: np.ndarray) -> np.ndarray:
    """Eigenvector i's weight in the diffusion coordinates (Coifman & Lafon 2006):
    ``lambda_i ** t``, ``t`` such that an eigenvalue at the cluster threshold weighs 1/2,
    so the directions the graph barely separates fade out instead of adding noise."""
    t = np.log(0.5) / np.log(EIGEN_THRESHOLD)
    return (np.clip(eigenvalues, 0.0, None) ** t).astype(np.float32)


def diffusion_coordinates(emb: SpectralEmbedding) -> np.ndarray:
    """(len(emb.rows), dims) float32: the sampled rows' diffusion coordinates
    (:func:`diffusion_weights`), each row of unit length."""
    x = emb.x * diffusion_weights(emb.eigenvalues)[None, :]
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def cluster_runs(emb: SpectralEmbedding, k: int, runs: int, *, seed: int = 0,
                 niter: int = 20) -> np.ndarray | CodedRuns:
    """(runs, N) int64: k-means runs (seeds ``seed + r``) on the diffusion coordinates
    of the embedding (:func:`diffusion_coordinates`); rows outside the sample take the
    majority cluster of their nearest cell of sampled rows (:func:`extended_runs`: by
    code, a :class:`~pairkit.core.coded_rows.CodedRuns`).

    Always numpy k-means, whatever engine searches: the sample is at most 20,000 rows
    in 32-64 dims (milliseconds a step), and torch's k-means draws other seeds, so runs
    on it made ``mine --backend torch`` hand out another table (67 of 12,000 negatives
    of a real set).

    Measured against "as many eigenvectors as clusters" and "16 eigenvectors" on real
    images: lower false-negative shares on all three sets.
    """
    from pairkit.index.kmeans import spherical_kmeans

    x = diffusion_coordinates(emb)
    labels = np.stack([spherical_kmeans(x, k, seed=seed + r, niter=niter)[0]
                       for r in range(runs)])
    n = len(emb.reduced)
    if len(emb.rows) == n:
        return labels
    return extended_runs(emb, labels, seed=seed)


def all_coordinates(emb: SpectralEmbedding, *, seed: int = 0) -> np.ndarray | CodedRows:
    """(N, dims) float16: every row's diffusion coordinates, unit length. Sampled rows
    keep theirs; every other row takes the normalised mean of its nearest cell's
    sampled rows (the cells of :func:`extended_runs`, the same extension as the
    clusters'). float16: 2 bytes a value, cosines to about 1e-3. Above the sample, by
    code (:class:`~pairkit.core.coded_rows.CodedRows`, :func:`row_codes`: the cells'
    means, then the sampled rows' own; 2 bytes a row instead of 2 x dims, 0.13 GB at 1M
    rows x 64)."""
    from pairkit.core.coded_rows import CodedRows

    x = diffusion_coordinates(emb)
    n = len(emb.reduced)
    if len(emb.rows) == n:
        return x.astype(np.float16)
    cell_of = _cells(emb, seed=seed)[0]
    sums = np.zeros((int(cell_of.max()) + 1, x.shape[1]), dtype=np.float64)
    np.add.at(sums, cell_of, x)
    means = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return CodedRows(row_codes(emb, seed=seed),
                     np.concatenate([means.astype(np.float16), x.astype(np.float16)]))


EXTEND_BLOCK_BYTES = 1 << 25  # 32 MiB of rows' similarities to the cells at a time


def extended_runs(emb: SpectralEmbedding, labels: np.ndarray, *, seed: int = 0) -> CodedRuns:
    """Labels (runs, N) of every row from the sample's ``labels`` (runs, len(rows)):
    sampled rows keep theirs; the sample is cut into small cells (:func:`_cells`), each
    cell takes its rows' majority label per run, and every other row takes the label of
    its nearest cell. By code (:func:`row_codes`): the cells' labels, then the sampled
    rows'."""
    from pairkit.core.coded_rows import CodedRuns

    cell_of = _cells(emb, seed=seed)[0]
    cells = int(cell_of.max()) + 1
    cell_label = np.zeros((labels.shape[0], cells), dtype=np.int64)
    for r in range(labels.shape[0]):
        counts = np.zeros((cells, int(labels[r].max()) + 1), dtype=np.int64)
        np.add.at(counts, (cell_of, labels[r]), 1)
        cell_label[r] = counts.argmax(axis=1)  # ties: the smallest label
    return CodedRuns(row_codes(emb, seed=seed),
                     np.concatenate([cell_label, np.asarray(labels, np.int64)], axis=1))


def row_codes(emb: SpectralEmbedding, *, seed: int = 0) -> np.ndarray:
    """(N,) each row's code in the tables of :func:`extended_runs` and
    :func:`all_coordinates`: its nearest cell (:func:`_cells`) for a row outside the
    sample, the number of cells plus its place in the sample for a sampled row; in the
    smallest integer type that holds them (2 bytes a row up to 32,768 codes). One array
    per seed (the runs and the coordinates share it)."""
    from pairkit.core.coded_rows import code_dtype

    if seed in emb.codes:
        return emb.codes[seed]
    cell_of, nearest, others = _cells(emb, seed=seed)
    cells = int(cell_of.max()) + 1
    codes = np.empty(len(emb.reduced), dtype=code_dtype(cells + len(emb.rows)))
    codes[emb.rows] = cells + np.arange(len(emb.rows))
    codes[others] = nearest
    emb.codes[seed] = codes
    return codes


def _cells(emb: SpectralEmbedding, *, seed: int = 0, per_cell: int = 16
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(cell_of, nearest, others)``: the sample cut into small cells
    (:func:`sample_cells`; ``cell_of`` per sampled row), the rows outside the sample
    (``others``, ascending) and the nearest cell of each (``nearest``,
    :func:`nearest_cells`). Work: N x cells x dims, not N x sample x dims. Kept on ``emb``
    per seed (the clusters and the coordinates share them; a plan may set them, the
    nearest cells found by a cluster's workers: :mod:`pairkit.mine.white_parts`)."""
    if seed in emb.cells:
        return emb.cells[seed]
    cell_of, centroids = sample_cells(emb, seed=seed, per_cell=per_cell)
    others = outside_sample(emb, np.arange(len(emb.reduced)))
    emb.cells[seed] = (cell_of, nearest_cells(emb.reduced, others, centroids), others)
    return emb.cells[seed]


def sample_cells(emb: SpectralEmbedding, *, seed: int = 0, per_cell: int = 16
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(cell_of, centroids)``: the sampled rows cut into small cells, about ``per_cell``
    rows each (spherical k-means in the principal components; ``cell_of`` (len(rows),)
    int64, ``centroids`` (cells, dims) float32)."""
    from pairkit.index.kmeans import spherical_kmeans

    base = np.ascontiguousarray(emb.reduced[emb.rows], dtype=np.float32)
    cells = max(2, len(emb.rows) // per_cell)
    cell_of, centroids = spherical_kmeans(base, cells, seed=seed, niter=10, init="random")
    return np.asarray(cell_of, dtype=np.int64), np.asarray(centroids, dtype=np.float32)


def outside_sample(emb: SpectralEmbedding, rows: np.ndarray) -> np.ndarray:
    """The ones of ``rows`` (ascending) outside the embedding's sample."""
    return np.setdiff1d(rows, emb.rows)


def nearest_cells(reduced: Any, rows: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """(len(rows),) int64: the nearest of ``centroids`` to each of ``rows`` of ``reduced``
    (the principal components), the similarities taken :data:`EXTEND_BLOCK_BYTES` at a
    time (a fixed 65,536 rows at a time held 0.33 GB with the 1,250 cells of a
    20,000-row sample, the peak of a whole ``mine --filter-false-negatives``)."""
    nearest = np.empty(len(rows), dtype=np.int64)
    block = max(1, EXTEND_BLOCK_BYTES // (4 * (len(centroids) + centroids.shape[1])))
    for s in range(0, len(rows), block):
        part = rows[s : s + block]
        nearest[s : s + block] = np.argmax(
            np.asarray(reduced[part], np.float32) @ centroids.T, axis=1)
    return nearest
