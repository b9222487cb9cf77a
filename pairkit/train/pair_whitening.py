"""The head's pair whitening: a linear map of the trained head's outputs learned from the
training table's own pairs, fitted after the last epoch and applied by
:meth:`pairkit.train.head.Head.apply` (the same ``whitening.safetensors`` as the output
whitening of :mod:`pairkit.train.output_whitening`).

This is the *learned whitening* of Mikolajczyk & Matas (ICCV 2007, *Improving
descriptors for fast tree matching by optimal linear projection*) as Radenović, Tolias &
Chum use it on CNN descriptors (PAMI 2018, *Fine-tuning CNN image retrieval with no
human annotation*, "learned whitening"), with the pairs a label-free ``pairkit mine``
table holds:

- ``C_S``, the covariance of the differences of the positive pairs (each example's
  anchor and positive: the other view, or a mined positive; and every mined positive of
  the training anchors), is what two images of one thing differ by. It is shrunk towards
  a multiple of the identity (``(1 - s) C_S + s tr(C_S) / d I``, Ledoit-Wolf style, ``s``
  = :data:`SHRINK`) and the outputs are whitened by it: ``x -> C_S^(-1/2) (x - mean)``,
  so the directions along which positives differ shrink and the others grow.
- ``C_D``, the covariance of the differences of the negative pairs (each anchor and its
  mined negatives, false negatives flagged for attraction left out), taken in that
  whitened space, gives the rotation: its leading :data:`DIMS` eigenvectors, the
  directions along which negatives differ most relative to positives (the generalised
  eigenproblem ``C_D v = l C_S v`` of linear discriminant analysis, with the mined pairs
  in place of classes).

So the mining pays twice: its positives say what to ignore, its hard negatives what to
keep. Without labels, closed form (two eigen solves of a d x d matrix), on at most
:data:`MAX_PAIRS` of each kind (a seeded sample). ``train``'s default keeps every
direction (``--pair-whitening all``: ``C_S^(-1/2)`` alone, no negatives needed; a run
without a table whitens by its relation's pairs, :func:`relation_pairs`): held-out kNN
top-1 and MAP@R up for the loop's head and the in-batch head on every real set of
docs/benchmarks.md ("The pair whitening on by default"), the linear probe within a few
thousandths. Rotated onto 128 directions (the first measurement, "Pair whitening"): more
MAP@R, a lower linear probe.
"""

from __future__ import annotations

import numpy as np

from pairkit.core.unique import unique_rows
from pairkit.train.output_whitening import Whitening

SHRINK = 0.3  # of C_S moved to the identity's multiple of the same trace
DIMS = 128  # components kept (all when the head's outputs have no more)
MAX_PAIRS = 200_000  # pairs of each kind the covariances are computed on (seeded sample)
BLOCK = 8192  # pairs per block of a covariance sum
SAMPLE_STREAM = (53, 9)  # the sample's random stream, after the run's seed
# d x d float64 matrices held at once at the peak of fit_pair_whitening (C_S, its shrunk
# copy, eigh's copy, workspace and vectors): peak RSS measured at d = 2,000 and 4,000,
# 5.1-5.2 of them with every direction kept, 8.1-8.8 rotated onto fewer dims
PEAK_MATRICES = 5
PEAK_MATRICES_ROTATED = 8


def fit_memory(d: int, dims: int) -> int:
    """Bytes that :func:`fit_pair_whitening` of ``d``-dim outputs onto ``dims`` holds at
    its peak (the outputs themselves not counted)."""
    return (PEAK_MATRICES if dims >= d else PEAK_MATRICES_ROTATED) * 8 * d * d


def difference_covariance(z: np.ndarray, pairs: np.ndarray,
                          projection: np.ndarray | None = None) -> np.ndarray:
    """``mean over pairs (i, j) of (z_i - z_j)(z_i - z_j)^T`` (float64, (D, D)), the
    differences projected by ``projection`` (d, D) first when given; blockwise."""
    d = z.shape[1] if projection is None else projection.shape[1]
    cov = np.zeros((d, d), np.float64)
    for s in range(0, len(pairs), BLOCK):
        p = pairs[s : s + BLOCK]
        diff = z[p[:, 0]].astype(np.float64) - z[p[:, 1]]
        if projection is not None:
            diff = diff @ projection
        cov += diff.T @ diff
    return cov / max(len(pairs), 1)


def fit_pair_whitening(z: np.ndarray, positives: np.ndarray, negatives: np.ndarray,
                       mean: np.ndarray, dims: int = DIMS, shrink: float = SHRINK
                       ) -> Whitening:
    """``(mean, projection (d, D))`` of the learned whitening (module docstring) of the
    outputs ``z`` (n, d), with ``positives`` and ``negatives`` (P, 2) row pairs into ``z``
    and ``mean`` (d,) the outputs' mean: ``projection = C_S^(-1/2) U``, ``U`` the leading
    ``dims`` eigenvectors of ``C_D`` in the whitened space (all of them, unrotated, when
    ``dims >= d``: then the negatives are not used). ValueError when the positives do not
    differ (C_S zero: every direction would be scaled by infinity) or are not finite."""
    if not len(positives) or (dims < z.shape[1] and not len(negatives)):
        raise ValueError("the pair whitening needs positive pairs (and negative ones to "
                         "keep fewer dims)")
    d = z.shape[1]
    cs = difference_covariance(z, positives)
    scale = float(np.trace(cs)) / d
    if not np.isfinite(cs).all() or scale <= 1e-12:
        raise ValueError("the positive pairs do not differ: nothing to whiten by")
    cs = (1.0 - shrink) * cs + shrink * scale * np.eye(d)
    values, vectors = np.linalg.eigh(cs)
    values = np.maximum(values, values.max() * 1e-12)
    w = (vectors * values ** -0.5) @ vectors.T
    if dims >= d:
        projection = w
    else:
        cd = difference_covariance(z, negatives, w)
        spread, rotation = np.linalg.eigh(cd)
        projection = w @ rotation[:, np.argsort(spread)[::-1][:dims]]
    return (np.asarray(mean, np.float32),
            np.ascontiguousarray(projection, dtype=np.float32))


def sample_pairs(pairs: np.ndarray, seed: int) -> np.ndarray:
    """At most :data:`MAX_PAIRS` of ``pairs`` (a seeded sample, in order)."""
    if len(pairs) <= MAX_PAIRS:
        return pairs
    rng = np.random.default_rng([seed, *SAMPLE_STREAM])
    return pairs[np.sort(rng.choice(len(pairs), MAX_PAIRS, replace=False))]


def relation_pairs(groups: np.ndarray, train_rows: np.ndarray, seed: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(positives, negatives)`` (P, 2) store-id pairs of a run without a table: each
    training row with the next training row of its group (the views of a source, or a
    label's items), cyclically, a group of two giving one pair; as many negatives, each a
    positive pair's first row with a seeded random training row of another group. At most
    :data:`MAX_PAIRS` of each (:func:`sample_pairs`)."""
    ids = np.flatnonzero(train_rows)
    if not len(ids):
        e = np.zeros((0, 2), np.int64)
        return e, e
    order = ids[np.lexsort((ids, groups[ids]))]
    g = groups[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    start, size = np.repeat(starts, sizes), np.repeat(sizes, sizes)
    at = np.arange(len(order))
    nxt = start + (at - start + 1) % size
    keep = (size > 2) | ((size == 2) & (at < nxt))
    pos = np.stack([order[keep], order[nxt[keep]]], axis=1).astype(np.int64)
    rng = np.random.default_rng([seed, *SAMPLE_STREAM, 1])
    other = order[rng.integers(0, len(order), len(pos))]
    ok = groups[other] != groups[pos[:, 0]]
    neg = np.stack([pos[ok, 0], other[ok]], axis=1).astype(np.int64)
    return sample_pairs(pos, seed), sample_pairs(neg, seed)


def training_pairs(anchor: np.ndarray, positive: np.ndarray, negatives: np.ndarray,
                   attract: np.ndarray, mined_offsets: np.ndarray | None,
                   mined_ids: np.ndarray | None, train_rows: np.ndarray, seed: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(positives, negatives)`` (P, 2) store-id pairs of the examples whose anchor is a
    training row (``train_rows``: bool (n,), not the validation sources): each anchor
    with its positive, with every mined positive of it (CSR ``mined_offsets`` /
    ``mined_ids``, None: none) and with its negatives (-1 and attracted ones left out);
    duplicates dropped, at most :data:`MAX_PAIRS` of each (:func:`sample_pairs`)."""
    keep = train_rows[anchor]
    a, p = anchor[keep], positive[keep]
    pos = [np.stack([a, p], axis=1)]
    if mined_offsets is not None and mined_ids is not None:
        anchors = np.unique(a)
        counts = mined_offsets[anchors + 1] - mined_offsets[anchors]
        starts = np.repeat(mined_offsets[anchors], counts)
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        pos.append(np.stack([np.repeat(anchors, counts), mined_ids[starts + within]], axis=1))
    negs = negatives[keep]
    ok = (negs >= 0) & ~attract[keep]
    neg = np.stack([np.repeat(a, ok.sum(axis=1)), negs[ok]], axis=1)
    both = unique_rows(np.concatenate(pos).astype(np.int64))[0]
    return (sample_pairs(both, seed),
            sample_pairs(unique_rows(neg.astype(np.int64))[0], seed))
