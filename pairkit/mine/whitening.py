"""Partial PCA whitening: the space in which mined positives' neighbours are found.

Raw embeddings are anisotropic: a few leading directions carry most of the variance, and
cosine neighbourhoods there are dominated by *hubs* (rows that are everybody's nearest
neighbour but few rows' mutual one). Rotating onto the principal components and scaling
each by ``eigenvalue ** -power`` (``power = 1/2`` is full PCA whitening, Jegou & Chum,
ECCV 2012, "Negative evidences and co-occurrences in image retrieval: the benefit of PCA
and whitening"; ``power = 1/4`` a partial one) flattens that spectrum, and the component
tail below ``variance`` of the total (mostly noise, which full whitening would blow up)
is dropped. Neighbour relations there are less hub-bound: on the real sets of
docs/benchmarks.md the mutual 10-nearest neighbours become ~40% more numerous at the same
precision, and training with them as positives gains ~+0.01 held-out kNN top-1 over
mutual neighbours of plain cosine (fm0, mnist5k, fm0-lt; "Downstream").

The fit is label-free and uses a seeded sample of at most ``sample`` rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from pairkit.core.row_view import RowView, is_view

DEFAULT_POWER = 0.25
DEFAULT_VARIANCE = 0.99
DEFAULT_MAX_DIMS = 512
CANDIDATE_DIMS = 128  # whitened components the candidates of whitened_neighbours come from
# the most whitened_neighbours' rows take as one array when it may whiten them when read
WHITEN_ONCE_BYTES = 64 << 20

Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Whitening:
    """``mean`` (d,), ``components`` (d, D) orthonormal columns, leading first, ``scale``
    (D,) the per-component factor ``eigenvalue ** -power``, ``variances`` (D,) float64
    the eigenvalues themselves (the sample's variance along each component): the
    principal components, which the ``cluster`` rule's graph also starts from
    (:func:`pairkit.mine.view_whitening.view_whitened_rows`)."""

    mean: np.ndarray
    components: np.ndarray
    scale: np.ndarray
    variances: np.ndarray

    @property
    def dims(self) -> int:
        return int(self.components.shape[1])

    def apply(self, vectors: np.ndarray, dims: int | None = None,
              block: int = 65_536) -> np.ndarray:
        """Rows centred, projected on the first ``dims`` (default all) components, scaled
        and re-normalised: float32 (N, dims). Memory: O(block x d) besides the result
        (normalised in place: a second (N, dims) array was 0.5 GB at 1M x 128)."""
        dims = self.dims if dims is None else min(dims, self.dims)
        proj = np.ascontiguousarray(self.components[:, :dims] * self.scale[:dims],
                                    dtype=np.float32)
        x = vectors if is_view(vectors) else np.asarray(vectors)  # a view: read in blocks
        out = np.empty((len(x), dims), dtype=np.float32)
        for s in range(0, len(x), block):
            out[s : s + block] = (np.asarray(x[s : s + block], dtype=np.float32)
                                  - self.mean) @ proj
        for s in range(0, len(out), block):  # in place: no second (N, dims) array
            part = out[s : s + block]
            part /= np.maximum(np.linalg.norm(part, axis=1, keepdims=True), 1e-12)
        return out


def fit_whitening(vectors: np.ndarray, *, power: float = DEFAULT_POWER,
                  variance: float = DEFAULT_VARIANCE, max_dims: int = DEFAULT_MAX_DIMS,
                  sample: int = 20_000, seed: int = 0) -> Whitening:
    """The partial whitening of ``vectors`` (N, d): the fewest leading principal components
    holding ``variance`` of the total (at most ``max_dims``), each scaled by
    ``eigenvalue ** -power`` (0: a plain PCA rotation, 0.5: full whitening).

    Eigenvalues below 1e-6 of the largest count as zero (never scaled up). Solved in
    float32 unless a kept eigenvalue is below :data:`FLOAT32_FLOOR` of the largest
    (then in float64).
    """
    if not 0.0 <= power <= 0.5:
        raise ValueError(f"power must be in [0, 0.5], got {power}")
    if not 0.0 < variance <= 1.0:
        raise ValueError(f"variance must be in (0, 1], got {variance}")
    x = vectors if is_view(vectors) else np.asarray(vectors)  # a view: the sample read
    n, d = x.shape
    rng = np.random.default_rng([seed, 31])
    rows = np.sort(rng.choice(n, size=sample, replace=False)) if n > sample else slice(None)
    fit = np.asarray(x[rows], dtype=np.float32)
    mean = fit.mean(axis=0, dtype=np.float64) if len(fit) else np.zeros(d)
    vals, vecs = _spectrum(fit, mean, np.float32)
    dims = _kept_dims(vals, variance, max_dims)
    if dims and vals[dims - 1] < FLOAT32_FLOOR * vals[0]:
        # float32 eigenvalues carry an error of ~1e-7 of the largest: too coarse for a
        # kept one this small (its scale would be off by > 0.1%), so float64 throughout
        vals, vecs = _spectrum(fit, mean, np.float64)
        dims = _kept_dims(vals, variance, max_dims)
    if dims == 0:  # all rows equal: no direction to scale
        return Whitening(mean.astype(np.float32), np.eye(d, 1, dtype=np.float32),
                         np.ones(1, np.float32), np.zeros(1))
    scale = vals[:dims] ** -power
    return Whitening(mean.astype(np.float32), vecs[:, :dims].astype(np.float32),
                     (scale / scale[0]).astype(np.float32), vals[:dims].copy())


FLOAT32_FLOOR = 1e-4  # the smallest kept eigenvalue (of the largest) float32 solves


def _spectrum(fit: np.ndarray, mean: np.ndarray, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (float64, descending, those below 1e-6 of the largest dropped) and
    eigenvectors (d, kept) of the covariance of ``fit`` (n, d) around ``mean``, computed
    in ``dtype``: LAPACK's divide-and-conquer solver (syevd), which in float32 is 2-3x
    faster than float64 on 1,280 dims (docs/benchmarks.md)."""
    from scipy.linalg import eigh

    centred = np.asarray(fit, dtype=dtype) - mean.astype(dtype)
    cov = centred.T @ centred / dtype(max(len(centred) - 1, 1))
    vals, vecs = eigh(cov, driver="evd", overwrite_a=True, check_finite=False)
    vals, vecs = vals[::-1].astype(np.float64), vecs[:, ::-1]
    top = float(vals[0]) if len(vals) else 0.0
    keep = vals > max(top, 0.0) * 1e-6
    return vals[keep], vecs[:, keep]


def _kept_dims(vals: np.ndarray, variance: float, max_dims: int) -> int:
    """The fewest leading components holding ``variance`` of the total, at most
    ``max_dims`` (0 when there are none)."""
    if len(vals) == 0:
        return 0
    share = np.cumsum(vals) / vals.sum()
    return int(min(np.searchsorted(share, variance - 1e-12) + 1, len(vals), max_dims))


def whitened_neighbours(vectors: np.ndarray, m: int, search: Search, *,
                        power: float = DEFAULT_POWER, seed: int = 0,
                        on_demand: bool = False, white: Whitening | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Every row's ``m`` nearest rows of other sources in the partial whitening of
    ``vectors`` (N, d) L2-normalised, best first, ``(ids, scores)`` (N, m) with the
    *plain cosine* scores, -1 / -inf padded.

    ``search(space, k)``: every row's ``k`` nearest rows of other sources in ``space``
    ``(ids, scores)`` (the caller's index: exact or approximate). Above
    :data:`CANDIDATE_DIMS` whitened components, candidates come from a search in the
    first of them three times as deep, re-ranked in all (98% of the exact lists on
    fm0-lt, docs/benchmarks.md). ``on_demand``: ``space`` may be a :class:`RowView` of
    rows computed as they are read (no second array beside the caller's index) instead of
    an array; it is one when the whitened rows would take more than
    :data:`WHITEN_ONCE_BYTES` (below, the index reading them again and again cost 0.7 s of
    a 5.8 s run at 8,000 x 1,280): the rows whitened when read (:func:`whitened_rows`), or,
    with a re-ranking, the first components of its array re-normalised when read. The
    re-ranking gets the (N, dims) array of all components in any case: it reads each row
    many times. ``white``: the whitening already fitted by this call's fit (``power``,
    ``seed``) where the search was planned (:mod:`pairkit.mine.white_parts`).
    """
    from pairkit.index.search import exact_scores

    if white is None:
        white = fit_whitening(vectors, power=power, seed=seed)
    rerank = white.dims > CANDIDATE_DIMS
    lazy = on_demand and len(vectors) * white.dims * 4 > WHITEN_ONCE_BYTES
    # the re-ranking reads every row's whitened form about 3 m times, in other rows' lists:
    # computed when read, each row was whitened that often (135 s of a 252 s run at
    # 200,000 x 1,280), so it gets them as one array; only the search is fed rows on demand
    full = whitened_rows(vectors, white) if lazy and not rerank else white.apply(vectors)
    if rerank:
        # the candidates' components, re-normalised, from that array: when read (a view
        # of it, no second array), never by whitening the rows again (all input dims
        # projected each time a cell was scanned; the same candidates)
        lead = partial(leading_normalised, dims=CANDIDATE_DIMS)
        head: np.ndarray | RowView
        if lazy:
            head = RowView(full[:, :CANDIDATE_DIMS], fn=lead, dim=CANDIDATE_DIMS)
            head.recompute = True  # an IVF index of them keeps ids (half_ivf.CellRows)
        else:
            head = lead(full)
        cand, _ = search(head, 3 * m)
        ranked = exact_scores(full, full, cand)
        order = np.argsort(-ranked, axis=1, kind="stable")[:, :m]
        ids = np.take_along_axis(cand, order, axis=1)
    else:
        ids, _ = search(full, m)
    return ids, exact_scores(vectors, vectors, ids)


def leading_normalised(rows: np.ndarray, dims: int) -> np.ndarray:
    """The first ``dims`` columns of ``rows`` (whitened rows), re-normalised: a new float32
    array."""
    head = np.array(rows[:, :dims], dtype=np.float32)
    head /= np.maximum(np.linalg.norm(head, axis=1, keepdims=True), 1e-12)
    return head


def whitened_rows(vectors: np.ndarray, white: Whitening, dims: int | None = None) -> RowView:
    """Rows ``0 .. N - 1`` of ``vectors`` (an array or a :class:`RowView`) through ``white``
    (its first ``dims`` components, re-normalised), computed when read: a :class:`RowView`
    mapped by ``white.apply``. What an index is built from and searched with
    (:func:`pairkit.index.faiss_build.build_index` takes rows read on demand) without an
    (N, dims) float32 array of them (0.5 GB at 1M x 128); an IVF index of them keeps their
    ids, not a copy, and reads a cell's rows again when it scans it (``recompute``:
    :class:`pairkit.index.half_ivf.CellRows`)."""
    width = white.dims if dims is None else min(dims, white.dims)
    fn = partial(white.apply, dims=width)
    view = vectors.mapped(fn, width) if is_view(vectors) else RowView(vectors, fn=fn, dim=width)
    view.recompute = True  # an IVF index of them keeps ids, not a copy (half_ivf.CellRows)
    return view
