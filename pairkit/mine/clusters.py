"""Graph pieces of the false-negative rules: the kNN graph of other sources, label
propagation over it (``community``), PCA, cluster counts. Spherical k-means is
:func:`pairkit.index.kmeans.spherical_kmeans`."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

from pairkit.core.row_view import RowView, is_view
from pairkit.index.search import rounded_depths


def cluster_counts(n: int, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Number of clusters for each wanted mean cluster size: ``max(2, round(n / size))``,
    capped at ``n``. Returns one count per entry of ``sizes``."""
    return tuple(int(min(n, max(2, round(n / s)))) for s in sizes)


def _exact(vectors: np.ndarray, backend: Any) -> Any:
    """The exact index of ``vectors`` on ``backend`` (the array itself for FAISS on CPU)."""
    if backend is None or (backend.name == "faiss" and not backend.gpu):
        return vectors
    from pairkit.index.open import exact_searcher

    return exact_searcher(vectors, backend).index


def knn_graph(
    vectors: np.ndarray, sources: np.ndarray, m: int, *, batch_size: int = 8192,
    backend: Any = None, progress: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``m`` nearest rows of *other* sources (exact inner product).

    Returns ``(ids, scores)`` of shape (N, m): int64 row ids (-1 padded where
    fewer exist) and float32 similarities, best first. ``backend``: a
    :class:`pairkit.index.backend.SearchBackend` (None: FAISS on the CPU); ``progress``:
    :func:`~pairkit.index.search.knn_search`'s hook (rows searched per block).
    """
    from pairkit.index.outside import search_outside_parts
    from pairkit.index.search import knn_search

    if is_view(vectors):  # an exact search of every row against every row: an array
        vectors = np.asarray(vectors, dtype=np.float32)
    sources = np.asarray(sources, dtype=np.int64)
    n = len(vectors)
    widths = own_source_widths(sources, m)
    index = _exact(vectors, backend)
    values = np.unique(widths)
    if len(values) <= 1:  # every row the same width: one search of every row
        width = int(values[0]) if len(values) else min(n, m + 1)
        scores, ids = knn_search(vectors, index, width, batch_size=batch_size,
                                 progress=progress)
        return other_sources(scores, ids, sources, m)
    ids = np.full((n, m), -1, dtype=np.int64)
    out = np.full((n, m), -np.inf, dtype=np.float32)
    skip = big_source_rows(sources) if isinstance(index, np.ndarray) else None
    for width, sel in width_blocks(widths, batch_size, skip):  # rows of one width together
        q = np.ascontiguousarray(vectors[sel])
        if width == 0:  # a big source: the exact search skips it
            scores, cand = search_outside_parts(
                index, sources, q, sources[sel], m,
                lambda a, b: knn_search(a, index, b, batch_size=batch_size))
            if progress is not None:
                progress(len(sel))
        else:
            scores, cand = knn_search(q, index, width, batch_size=batch_size,
                                      progress=progress)
        ids[sel], out[sel] = other_sources(scores, cand, sources, m, sources[sel])
    return ids, out


def big_source_rows(sources: np.ndarray) -> np.ndarray:
    """(N,) bool: the rows of sources of more than ``OVER_FETCH_ROWS`` rows (1,024), which
    an exact search skips (:func:`pairkit.index.outside.search_outside_parts`) rather
    than fetching them and dropping them."""
    from pairkit.index.outside import OVER_FETCH_ROWS

    sources = np.asarray(sources, dtype=np.int64)
    if not len(sources):
        return np.zeros(0, bool)
    return np.asarray(np.bincount(sources)[sources] > OVER_FETCH_ROWS)


# hits (scores and ids) of one block of rows of a deep width: ~200 MB
WIDTH_BLOCK_ENTRIES = 1 << 24


def width_blocks(widths: np.ndarray, block_rows: int, skip: np.ndarray | None = None
                 ) -> Iterator[tuple[int, np.ndarray]]:
    """``(width, rows)`` for the rows of each distinct width (ascending), in blocks of at
    most ``block_rows`` rows and :data:`WIDTH_BLOCK_ENTRIES` // width (so a deep width
    holds no more hits at once than a shallow one); width 0 for the rows ``skip`` (N,)
    bool marks (their own source skipped by the search, not fetched)."""
    if skip is not None and skip.any():
        widths = np.where(skip, 0, widths)
    for width in np.unique(widths):
        rows = np.flatnonzero(widths == width)
        step = max(1, min(block_rows, WIDTH_BLOCK_ENTRIES // max(int(width), 1)))
        for lo in range(0, len(rows), step):
            yield int(width), rows[lo:lo + step]


def own_source_widths(sources: np.ndarray, m: int) -> np.ndarray:
    """(N,) int64: how deep each row is searched for ``m`` rows of other sources: ``m`` +
    the size of *its own* source (not of the largest: one source of 10,000 views made
    every row fetch 10,000 more), the size rounded up to a power of two (at most the
    largest) so that few distinct widths are searched; at most N."""
    sources = np.asarray(sources, dtype=np.int64)
    n = len(sources)
    if n == 0:
        return np.zeros(0, np.int64)
    return np.minimum(n, m + rounded_depths(np.bincount(sources)[sources]))


def approximate_widths(sources: np.ndarray, m: int) -> np.ndarray:
    """(N,) int64: how deep an approximate search whose first hits don't depend on k
    (IVF-Flat; others: :func:`largest_source_widths`) searches each row for ``m`` rows
    of other sources: every row ``m`` + the largest source, as before, except where a
    source has more than ``OVER_FETCH_ROWS`` rows (1,024): its rows ``m`` + its size,
    every other row ``m`` + the largest of the *other* sources (one source of 10,000
    views made every row fetch 10,000 more); at most N. A store without such a source is
    searched exactly as before."""
    sources = np.asarray(sources, dtype=np.int64)
    n = len(sources)
    if n == 0:
        return np.zeros(0, np.int64)
    counts = np.bincount(sources)
    big = big_source_rows(sources)
    if not big.any():
        return largest_source_widths(sources, m)
    small = int(counts[sources[~big]].max(initial=1))
    return np.minimum(n, m + np.where(big, counts[sources], small)).astype(np.int64)


def largest_source_widths(sources: np.ndarray, m: int) -> np.ndarray:
    """(N,) int64: every row ``m`` + the largest source deep (at most N), how a search
    whose hits depend on k searches each row for ``m`` rows of other sources."""
    n = len(sources)
    largest = int(np.bincount(np.asarray(sources, dtype=np.int64)).max(initial=0))
    return np.full(n, min(n, m + largest), np.int64)


def other_sources(scores: np.ndarray, ids: np.ndarray, sources: np.ndarray, m: int,
                  query_sources: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Every row's first ``m`` hits of *other* sources, ``(ids, scores)`` (N, m), from a
    search of the rows against themselves ``(scores, ids)`` (N, k), best first: own-source
    hits and padding dropped, -1 / -inf padded when fewer are left. ``query_sources``: the
    sources of the searched rows when they are not all of ``sources`` (a block of them)."""
    mine = sources if query_sources is None else query_sources
    own = (ids < 0) | (sources[np.maximum(ids, 0)] == mine[:, None])
    order = np.argsort(own, axis=1, kind="stable")[:, :m]
    ids = np.take_along_axis(np.where(own, -1, ids), order, axis=1)
    scores = np.take_along_axis(np.where(own, -np.inf, scores), order, axis=1)
    if ids.shape[1] < m:  # fewer rows than m + views
        pad = m - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return ids, scores.astype(np.float32)


def propagate_once(labels: np.ndarray, nb: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """One label-propagation step: each row's weighted majority label among its
    neighbours ``nb`` (N, m), weights (N, m) (negative or padded entries count 0);
    ties go to the smallest label; a row with no neighbour keeps its label.
    Returns the proposed labels, int64 (N,)."""
    n, m = nb.shape
    if n == 0 or m == 0:
        return labels.copy()
    valid = nb >= 0
    w = np.where(valid, np.maximum(weights, 0.0), 0.0).astype(np.float64)
    nl = np.where(valid, labels[np.maximum(nb, 0)], -1)
    order = np.argsort(nl, axis=1, kind="stable")
    sl = np.take_along_axis(nl, order, axis=1)
    sw = np.take_along_axis(w, order, axis=1)
    new_run = np.ones(sl.shape, dtype=bool)
    new_run[:, 1:] = sl[:, 1:] != sl[:, :-1]
    starts = np.flatnonzero(new_run.ravel())
    total = np.add.reduceat(sw.ravel(), starts)
    run_row = starts // m  # nondecreasing; every row has at least one run
    run_label = sl.ravel()[starts]
    total = np.where(run_label >= 0, total, -1.0)
    row_first = np.flatnonzero(np.r_[True, run_row[1:] != run_row[:-1]])
    row_max = np.maximum.reduceat(total, row_first)
    # runs are in label order within a row, so the first run at the row's
    # maximum is the heaviest label, ties to the smallest
    at_max = np.flatnonzero(total == row_max[run_row])
    first = at_max[np.r_[True, run_row[at_max[1:]] != run_row[at_max[:-1]]]]
    proposal = run_label[first]
    has = total[first] > 0
    return np.where(has, proposal, labels).astype(np.int64)


def label_propagation(
    nb: np.ndarray,
    weights: np.ndarray,
    *,
    iters: int = 30,
    seed: int = 0,
    update_fraction: float = 0.5,
) -> np.ndarray:
    """Communities of a kNN graph by weighted label propagation (Raghavan,
    Albert & Kumara 2007). Every row starts with its own label; each step a
    seeded random ``update_fraction`` of rows takes the weighted majority label
    of its neighbours (updating only part of the rows damps the oscillations of
    fully synchronous propagation). Stops after ``iters`` steps or when under
    0.01 % of rows would change. Returns int64 community id per row, shape (N,),
    numbered 0.. in order of first appearance.
    """
    n = len(nb)
    labels = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for _ in range(iters):
        proposal = propagate_once(labels, nb, weights)
        if int((proposal != labels).sum()) <= n * 1e-4:
            labels = proposal
            break
        update = rng.random(n) < update_fraction
        labels = np.where(update, proposal, labels)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse].astype(np.int64)


def pca_reduce(vectors: np.ndarray, dims: int = 32, *, sample: int = 20_000, seed: int = 0,
               block: int = 65_536) -> np.ndarray:
    """Rows projected on their ``dims`` leading principal components, re-normalised:
    float32 (N, min(dims, d)), all of them (:func:`pca_rows` read in ``block`` rows at a
    time).

    k-means on the leading components finds the same coarse clusters as on the full
    vectors (measured on real embeddings: docs/benchmarks.md) at a fraction of the
    cost.
    """
    rows = pca_rows(vectors, dims, sample=sample, seed=seed)
    out = np.empty(rows.shape, dtype=np.float32)
    for s, part in rows.blocks(block):
        out[s : s + len(part)] = part
    return out


def pca_rows(vectors: Any, dims: int = 32, *, sample: int = 20_000,
             seed: int = 0) -> RowView:
    """The rows of :func:`pca_reduce`, computed when read: a
    :class:`~pairkit.core.row_view.RowView` of ``vectors`` (an array or a view) mapped by
    the projection and the normalisation, so no (N, dims) float32 array of them is held
    (0.5 GB at 1M x 128: the cluster rule reads every row twice, for its sample's graph
    and for the runs' extension, and the mined positives' candidate lists once more).

    The components come from a randomized SVD (Halko, Martinsson & Tropp 2011, two power
    iterations) of a seeded sample of at most ``sample`` centred rows; with ``d <= dims``
    (or under 3 rows) the rows themselves, normalised.
    """
    x = vectors if is_view(vectors) else np.asarray(vectors)  # a view: the sample read
    n, d = x.shape
    if d <= dims or n < 3:
        return _mapped(x, _normalised, d)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=sample, replace=False)) if n > sample else slice(None)
    fit = np.asarray(x[rows], dtype=np.float32)
    mean = fit.mean(axis=0)
    fit = fit - mean
    width = min(d, dims + 10)
    y = fit @ rng.standard_normal((d, width)).astype(np.float32)
    for _ in range(2):  # power iterations sharpen the leading directions
        y, _ = np.linalg.qr(y)
        y = fit @ (fit.T @ y)
    q, _ = np.linalg.qr(y)
    _, _, vt = np.linalg.svd(q.T @ fit, full_matrices=False)
    comps = np.ascontiguousarray(vt[:dims].T, dtype=np.float32)  # (d, dims)
    return projected_rows(x, mean, comps)


def projected_rows(x: Any, mean: np.ndarray, comps: np.ndarray) -> RowView:
    """The rows of ``x`` (an array or a view) centred on ``mean``, projected on ``comps``
    (d, D) and normalised, computed when read."""
    return _mapped(x, partial(_projected, mean=mean, comps=comps), comps.shape[1])


def _mapped(x: Any, fn: Any, dim: int) -> RowView:
    view = x.mapped(fn, dim) if is_view(x) else RowView(x, fn=fn, dim=dim)
    view.recompute = True  # an IVF index of them keeps ids, not a copy (half_ivf.CellRows)
    return view


def _normalised(rows: np.ndarray) -> np.ndarray:
    """``rows`` (a new float32 array) scaled to unit length in place."""
    rows = np.array(rows, dtype=np.float32)
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows


def _projected(rows: np.ndarray, *, mean: np.ndarray, comps: np.ndarray) -> np.ndarray:
    """``rows`` centred on ``mean``, projected on ``comps`` and normalised."""
    out = (np.asarray(rows, dtype=np.float32) - mean) @ comps
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)  # in place
    return out
