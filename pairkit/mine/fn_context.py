"""What the false-negative rules know about the whole store, computed once per run.

:class:`FnContext` holds the vectors, labels, sources and the pieces that several
rules share (label codes, the source -> views table, near-duplicate groups, the
kNN graph and its communities, the k-means consensus runs). Each piece is
computed on first use and kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.mine.thresholds import NEAR_DUPLICATE_THRESHOLD, reachable

if TYPE_CHECKING:
    from pairkit.core.coded_rows import CodedRows, CodedRuns
    from pairkit.index.backend import SearchBackend
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.spectral import SpectralEmbedding



# gathered rows (or candidates) per block of anchors of the near-duplicate rule's products
SIMILARITY_BLOCK_BYTES = 1 << 26


@dataclass
class FnContext:
    """What the rules need about the whole store; build once per mining run.

    ``vectors`` (N, d) float32 L2-normalised, ``labels`` (N,) object or None,
    ``sources`` (N,) int64 source codes, ``groups`` (N,) int64 near-duplicate
    group per item (-1: none) or None (computed on first use), ``file_sha256``
    (N,) object or None (joins exact copies into groups), ``views`` (N,) view
    numbers or None (which view of a source stands for it in grouping),
    ``neighbours`` optional ``(ids, scores)`` (N, m): every row's nearest rows
    of other sources, best first, -1 padded (reused by the ``community`` rule
    instead of a search of its own). ``cluster_assign`` (G, N): the k-means runs
    of the ``cluster`` rule (set by hand to skip k-means); ``cluster_key`` the
    ``(ks, runs, niter)`` they were computed for (None: set by hand), ``spectral`` the
    kNN graph's spectral embedding they were computed from.
    ``pairwise_near_duplicates``: the near-duplicate rule compares each pair with its
    threshold instead of building store-wide groups (set when the search already skips
    the anchor's clusters, and for the label-free estimate's hidden sources).
    """

    vectors: np.ndarray
    labels: np.ndarray | None
    sources: np.ndarray
    groups: np.ndarray | None = None
    file_sha256: np.ndarray | None = None
    views: np.ndarray | None = None
    seed: int = 0
    label_codes: np.ndarray | None = None
    # (G, N) int16 (rules.cluster.compact); above the spectral sample by code (CodedRuns)
    cluster_assign: np.ndarray | CodedRuns | None = None
    cluster_info: dict[str, Any] = field(default_factory=dict)  # k chosen, stability table
    source_views: np.ndarray | None = None  # (n_sources, max_views) int64, -1 padded
    # the rows by source: (order, starts, counts), :func:`source_rows` (no table as wide as
    # the largest source)
    source_index: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    neighbours: tuple[np.ndarray, np.ndarray] | None = None  # (ids, scores), each (N, m)
    communities: np.ndarray | None = None  # (N,) int64
    cluster_key: tuple[tuple[int, ...], int, int] | None = None
    spectral: SpectralEmbedding | None = None
    pairwise_near_duplicates: bool = False
    backend: SearchBackend | None = None  # engine of the rules' searches; None: FAISS CPU
    paths: np.ndarray | None = None  # (N,) item paths under image_root (the pixel check)
    image_root: str | None = None
    image_column: str | None = None  # a dataset store's embed --image-column (pixel check)
    near_duplicate_decision: dict[str, Any] | None = None  # how the groups were decided
    # (ids, cosine scores) (N, m): nearest other-source rows in the partial whitening
    # (pairkit.mine.whitening), shared by the mutual-neighbour rule and mined positives
    whitened_neighbours: tuple[np.ndarray, np.ndarray] | None = None
    # that whitening's fit (pairkit.mine.whitening.Whitening): the principal components
    # the cluster rule's graph starts from too (None: the rule fits them)
    principal: Any = None
    mutual_source_keys: np.ndarray | None = None  # sorted src_a * n_sources + src_b
    # the mutual-neighbour rule's guard (random_pair_share, off) and its lists' depth when
    # cut to the sources less one (neighbours): pairkit.mine.rules.mutual.guard
    mutual_info: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"  # the stored rows' dtype (how far short of 1 identical rows are)
    # (N, dims) float16: every row's diffusion coordinates, unit length (the cluster
    # rule's threshold; pairkit.mine.spectral.all_coordinates: by code above its sample)
    diffusion: np.ndarray | CodedRows | None = None

    @property
    def count(self) -> int:
        return int(self.vectors.shape[0])


def label_codes(ctx: FnContext) -> np.ndarray | None:
    """int64 code per item (-1 where the label is missing), or None without labels."""
    if ctx.labels is None:
        return None
    if ctx.label_codes is None:
        from pairkit.core.store import codes_of

        ctx.label_codes = codes_of(ctx.labels)[0]
    return ctx.label_codes


def source_views(ctx: FnContext) -> np.ndarray:
    """(n_sources, max_views) int64: the rows of each source, -1 padded."""
    if ctx.source_views is None:
        src = ctx.sources
        n = len(src)
        if n == 0:
            ctx.source_views = np.zeros((0, 1), dtype=np.int64)
            return ctx.source_views
        order = np.argsort(src, kind="stable")
        sorted_src = src[order]
        n_sources = int(sorted_src[-1]) + 1
        counts = np.bincount(sorted_src, minlength=n_sources)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        col = np.arange(n) - starts[sorted_src]
        table = np.full((n_sources, max(int(counts.max()), 1)), -1, dtype=np.int64)
        table[sorted_src, col] = order
        ctx.source_views = table
    return ctx.source_views


def source_rows(ctx: FnContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, starts, counts)``: the rows sorted by source (stable), where each source
    starts in ``order`` and its row count; O(N), where the :func:`source_views` table is
    (sources x the largest source): 7,500 sources and one of 10,000 views made 600 MB."""
    if ctx.source_index is None:
        src = np.asarray(ctx.sources, dtype=np.int64)
        order = np.argsort(src, kind="stable")
        counts = np.bincount(src) if len(src) else np.zeros(0, np.int64)
        starts = np.cumsum(counts) - counts
        ctx.source_index = (order, starts, counts)
    return ctx.source_index


def other_views(ctx: FnContext, anchors: np.ndarray) -> np.ndarray:
    """(n, v) the other views of each anchor's source, -1 padded (in row order, the
    anchor's own place -1 too); v the largest of *these* anchors' sources."""
    order, starts, counts = source_rows(ctx)
    src = ctx.sources[anchors]
    c = counts[src] if len(anchors) else np.zeros(0, np.int64)
    width = max(int(c.max(initial=0)), 1)
    col = np.arange(width)
    at = np.minimum(starts[src][:, None] + col, max(len(order) - 1, 0))
    views = np.where(col < c[:, None], order[at], -1) if len(order) else \
        np.full((len(anchors), width), -1, np.int64)
    return np.where(views == anchors[:, None], -1, views)


def near_duplicate_threshold(config: FalseNegativeConfig, dtype: str = "float32") -> float:
    """The cosine threshold of the near-duplicate rule: the config's, else
    ``pairkit dedup``'s measured default, as rows stored in ``dtype`` can meet it (``1``:
    identical rows, whose inner product falls short of 1 by rounding; ``dedup -t 1`` alike)."""
    t = config.near_duplicate_threshold
    return reachable(float(NEAR_DUPLICATE_THRESHOLD if t is None else t), dtype)


def near_duplicate_group_ids(ctx: FnContext, config: FalseNegativeConfig) -> np.ndarray | None:
    """Near-duplicate group per item ((N,) int64, -1 none): ``pairkit dedup``'s groups,
    with the decision ``config.near_duplicate_method`` names
    (:func:`pairkit.mine.near_duplicate_check.choose_check`; mine's default is the
    embedding threshold, dedup's the pixel check when the images can be read). None when
    the run compares each offered pair with the threshold instead (a search that skips
    the anchor's clusters, and no images) or ``pairkit.mine.near_duplicates`` is absent."""
    if ctx.groups is not None:
        return ctx.groups
    try:
        from pairkit.mine.near_duplicate_check import PixelCheck, choose_check
        from pairkit.mine.near_duplicates import near_duplicate_groups
    except ImportError:
        return None
    check = choose_check(
        ctx.vectors, ctx.paths, ctx.image_root, config.near_duplicate_method,
        None if config.near_duplicate_threshold is None
        else near_duplicate_threshold(config, ctx.dtype),
        knn_backend=ctx.backend, seed=ctx.seed, image_column=ctx.image_column,
        **({} if ctx.backend is None else
           {"device": ctx.backend.device, "backend": ctx.backend.name}))
    if ctx.pairwise_near_duplicates and not isinstance(check, PixelCheck):
        return None  # the rule compares each pair with the threshold instead
    ctx.groups = np.asarray(
        near_duplicate_groups(
            ctx.vectors,
            near_duplicate_threshold(config, ctx.dtype),
            file_sha256=ctx.file_sha256,
            sources=ctx.sources,
            views=ctx.views,
            check=check,
        ),
        dtype=np.int64,
    )
    ctx.near_duplicate_decision = check.describe()
    return ctx.groups


def knn_neighbours(ctx: FnContext, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``m`` nearest rows of other sources, ``(ids, scores)`` (N, m):
    the caller's graph when it is deep enough, else one exact search (kept)."""
    from pairkit.mine.clusters import knn_graph

    given = ctx.neighbours
    if given is not None and given[0].shape[1] >= m:
        return given[0][:, :m], given[1][:, :m]
    ctx.neighbours = knn_graph(ctx.vectors, ctx.sources, m, backend=ctx.backend)
    return ctx.neighbours


def similarity_to_rows(vectors: np.ndarray, rows: np.ndarray, cand: np.ndarray,
                       block_bytes: int = 1 << 26) -> np.ndarray:
    """(n, m, k) float32 inner products of ``vectors[rows]`` (n, m) and
    ``vectors[cand]`` (n, k); NaN where a row id is -1 (a candidate of -1 gives
    row 0's similarity: callers mask padding).

    Per block of anchors: short candidate lists are scored by id, one row column at a
    time (:func:`pairkit.index.search.exact_scores`, in place for a float32 store), or,
    where the rows outnumber the candidates (an anchor of a source of thousands of views
    and one candidate: the estimate's random pairs), one candidate column at a time
    against the rows (the same kernel, the same products); long ones (k in the hundreds
    or thousands, which share most candidates) multiply the block's rows once by its
    distinct candidates and look the products up, which costs one matrix product instead
    of k x d multiply-adds per anchor.
    """
    n, m = rows.shape
    k = cand.shape[1]
    out = np.empty((n, m, k), dtype=np.float32)
    for s, e, block in similarity_blocks(vectors, rows, cand, block_bytes):
        out[s:e] = block
    return out


def any_similar(vectors: np.ndarray, rows: np.ndarray, cand: np.ndarray, threshold: float,
                block_bytes: int | None = None) -> np.ndarray:
    """(n, k) bool: some row of ``rows`` (n, m) (-1: none) has an inner product of at least
    ``threshold`` with the candidate; the products of :func:`similarity_to_rows`, block by
    block, never all (n, m, k) of them at once (``block_bytes``: default
    :data:`SIMILARITY_BLOCK_BYTES`)."""
    out = np.zeros(cand.shape, dtype=bool)
    size = SIMILARITY_BLOCK_BYTES if block_bytes is None else block_bytes
    for s, e, block in similarity_blocks(vectors, rows, cand, size):
        out[s:e] = (block >= threshold).any(axis=1)  # NaN (padding) never is
    return out


def similarity_blocks(vectors: np.ndarray, rows: np.ndarray, cand: np.ndarray,
                      block_bytes: int = 1 << 26) -> Any:
    """``(start, end, block)`` over the anchors: ``block`` (end - start, m, k) of
    :func:`similarity_to_rows`."""
    from pairkit.index.search import exact_scores

    n, m = rows.shape
    k = cand.shape[1]
    if n == 0 or k == 0 or m == 0:
        return
    d = vectors.shape[1]
    in_place = (isinstance(vectors, np.ndarray) and vectors.dtype == np.float32
                and vectors.flags.c_contiguous and vectors.ndim == 2)
    step = max(1, block_bytes // max(1, 4 * max(k, m) * d))  # gathered rows or candidates
    for s in range(0, n, step):
        e = min(n, s + step)
        r = rows[s:e]
        c = np.maximum(cand[s:e], 0)
        uniq, inv = np.unique(c, return_inverse=True)
        inv = inv.reshape(c.shape)
        if not m * len(uniq) < 8 * k and m > k and in_place:
            # more rows than candidates: each candidate against the rows by id (FAISS's
            # kernel is symmetric in its two vectors: the same float32 products)
            safe = np.ascontiguousarray(np.maximum(r, 0))
            block = np.stack([exact_scores(vectors[c[:, j]], vectors, safe)
                              for j in range(k)], axis=2)
        else:
            left = np.asarray(vectors[np.maximum(r, 0).ravel()], dtype=np.float32)
            left = left.reshape(e - s, m, d)
            if m * len(uniq) < 8 * k:  # long lists: one product with the distinct candidates
                right = np.asarray(vectors[uniq], dtype=np.float32)
                sims = (left.reshape(-1, d) @ right.T).reshape(e - s, m, len(uniq))
                block = np.take_along_axis(sims, inv[:, None, :], axis=2)
            else:
                block = np.stack([exact_scores(left[:, j], vectors, c) for j in range(m)],
                                 axis=1)
        block = block.astype(np.float32, copy=False)
        block[np.broadcast_to((r < 0)[:, :, None], block.shape)] = np.nan
        yield s, e, block
