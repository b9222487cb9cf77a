"""Flag likely false negatives among mined candidates.

A false negative is a candidate negative that is really the same thing as the
anchor (same class, or a near-duplicate). Each rule below looks at the anchor,
its candidate negatives and (where needed) its positives, and flags some
candidates; a candidate is flagged when any chosen rule flags it. Methods and
sources: docs/methods.md ("False negatives").

Rules (names as on the command line, reasons as written in ``fn_reason``):

- ``label`` (reason ``label``): candidate has the anchor's label.
- ``near-duplicate`` (``near_duplicate``): candidate is in the near-duplicate
  group of the anchor or of one of its positives.
- ``margin`` (``margin``): candidate score above ``margin`` of the positive
  score (the percent-of-positive rule).
- ``cluster`` (``cluster``): candidate shares the anchor's spherical k-means
  cluster in at least ``cluster_votes`` of several granularities.
- ``support`` (``support``): candidate's similarity to the anchor's support
  views (all views of its source), aggregated by max or mean, is above a
  threshold (false-negative cancellation).
- ``community`` (``community``): candidate is in the anchor's community of the
  kNN graph (weighted label propagation over each item's nearest other
  sources); communities adapt to unequal class sizes.

Everything is vectorised over anchors and processed in blocks; nothing is
N x N.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pairkit.errors import UsageError

RULES: tuple[str, ...] = ("label", "near-duplicate", "margin", "cluster", "support", "community")
REASONS: dict[str, str] = {
    "label": "label",
    "near-duplicate": "near_duplicate",
    "margin": "margin",
    "cluster": "cluster",
    "support": "support",
    "community": "community",
}
# Rules that judge by similarity; with trust_labels, labelled pairs skip them.
SIMILARITY_RULES: tuple[str, ...] = ("margin", "cluster", "support", "community")
# Chosen by measurement: docs/benchmarks.md ("False negatives").
DEFAULT_RULES: tuple[str, ...] = ("label", "near-duplicate", "community")
SUPPORT_AGGREGATES: tuple[str, ...] = ("max", "mean")

# Used only when pairkit.mine.near_duplicates (and its measured default) is absent.
_NEAR_DUPLICATE_FALLBACK = 0.965
# Bytes of float32 scratch per block in the support / positive-similarity loops.
_BLOCK_BYTES = 1 << 26


@dataclass(frozen=True)
class FalseNegativeConfig:
    """Which rules flag false negatives, and each rule's parameters.

    ``cluster_ks`` (explicit cluster counts) overrides ``cluster_sizes`` (wanted
    mean cluster size in items, one per granularity: ``k = round(N / size)``).
    ``trust_labels``: with the ``label`` rule on, a pair whose anchor and
    candidate both carry a label is decided by the labels (and near-duplicate
    groups) alone; the similarity rules (margin, cluster, support, community) judge only
    pairs with a missing label.
    """

    rules: tuple[str, ...] = DEFAULT_RULES
    margin: float = 0.95
    near_duplicate_threshold: float | None = None  # None: `pairkit dedup`'s default
    cluster_sizes: tuple[int, ...] = (64, 128, 256)
    cluster_ks: tuple[int, ...] = ()
    cluster_votes: int = 2
    cluster_niter: int = 10
    support_aggregate: str = "max"
    support_threshold: float = 0.5
    support_top: int = 0
    support_include_anchor: bool = True
    community_neighbors: int = 15
    community_iters: int = 50
    community_max_share: float = 0.9  # a community holding more of the items flags nothing
    trust_labels: bool = True

    def __post_init__(self) -> None:
        validate_config(self)


def validate_config(config: FalseNegativeConfig) -> None:
    """Raise :class:`UsageError` with a one-line reason for a bad config."""
    for rule in config.rules:
        if rule not in RULES:
            raise UsageError(
                f"unknown false-negative rule {rule!r}; choose from {', '.join(RULES)}"
            )
    if len(set(config.rules)) != len(config.rules):
        raise UsageError(f"false-negative rules repeat: {','.join(config.rules)}")
    if not 0.0 < config.margin <= 1.0:
        raise UsageError(f"margin must be in (0, 1], got {config.margin}")
    t = config.near_duplicate_threshold
    if t is not None and not 0.0 < t <= 1.0:
        raise UsageError(
            f"near-duplicate threshold must be in (0, 1], got {t}"
        )
    if not config.cluster_ks and not config.cluster_sizes:
        raise UsageError("cluster rule needs cluster_sizes or cluster_ks")
    if any(s < 1 for s in config.cluster_sizes):
        raise UsageError(f"cluster sizes must be >= 1, got {config.cluster_sizes}")
    if any(k < 1 for k in config.cluster_ks):
        raise UsageError(f"cluster counts must be >= 1, got {config.cluster_ks}")
    n_gran = len(config.cluster_ks) or len(config.cluster_sizes)
    if not 1 <= config.cluster_votes <= n_gran:
        raise UsageError(
            f"cluster votes must be between 1 and the number of granularities ({n_gran}), "
            f"got {config.cluster_votes}"
        )
    if config.cluster_niter < 1:
        raise UsageError(f"cluster iterations must be >= 1, got {config.cluster_niter}")
    if config.support_aggregate not in SUPPORT_AGGREGATES:
        raise UsageError(
            f"support aggregate must be one of {', '.join(SUPPORT_AGGREGATES)}, "
            f"got {config.support_aggregate!r}"
        )
    if not -1.0 <= config.support_threshold <= 1.0:
        raise UsageError(f"support threshold must be in [-1, 1], got {config.support_threshold}")
    if config.support_top < 0:
        raise UsageError(f"support top must be >= 0 (0 = no limit), got {config.support_top}")
    if config.community_neighbors < 1:
        raise UsageError(
            f"community neighbors must be >= 1, got {config.community_neighbors}"
        )
    if not 0.0 < config.community_max_share <= 1.0:
        raise UsageError(
            f"community max share must be in (0, 1], got {config.community_max_share}"
        )
    if config.community_iters < 1:
        raise UsageError(f"community iterations must be >= 1, got {config.community_iters}")


def parse_rules(text: str) -> tuple[str, ...]:
    """``"label,cluster"`` -> ``("label", "cluster")``; raises UsageError on unknown names."""
    rules = tuple(r.strip() for r in text.split(",") if r.strip())
    if not rules:
        raise UsageError("--fn-rules needs at least one rule")
    for rule in rules:
        if rule not in RULES:
            raise UsageError(
                f"unknown false-negative rule {rule!r}; choose from {', '.join(RULES)}"
            )
    return rules


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
    instead of a search of its own).
    """

    vectors: np.ndarray
    labels: np.ndarray | None
    sources: np.ndarray
    groups: np.ndarray | None = None
    file_sha256: np.ndarray | None = None
    views: np.ndarray | None = None
    seed: int = 0
    label_codes: np.ndarray | None = None
    cluster_assign: np.ndarray | None = None  # (G, N) int64; set by hand to skip k-means
    source_views: np.ndarray | None = None  # (n_sources, max_views) int64, -1 padded
    neighbours: tuple[np.ndarray, np.ndarray] | None = None  # (ids, scores), each (N, m)
    communities: np.ndarray | None = None  # (N,) int64
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return int(self.vectors.shape[0])


def build_context(
    vectors: np.ndarray,
    labels: np.ndarray | None,
    sources: np.ndarray,
    config: FalseNegativeConfig,
    seed: int = 0,
    *,
    groups: np.ndarray | None = None,
    file_sha256: np.ndarray | None = None,
    views: np.ndarray | None = None,
    neighbours: tuple[np.ndarray, np.ndarray] | None = None,
) -> FnContext:
    """Prepare an :class:`FnContext` for ``config``'s rules.

    Precomputes what the chosen rules need (label codes, k-means assignments,
    the source -> views table); near-duplicate groups are computed on first
    use unless given. Returns the context.
    """
    from pairkit.index.search import as_float32

    vectors = as_float32(vectors)
    sources = np.asarray(sources, dtype=np.int64)
    if vectors.ndim != 2:
        raise UsageError(f"vectors must be 2-D, got shape {vectors.shape}")
    if len(sources) != len(vectors):
        raise UsageError(f"sources has {len(sources)} rows, vectors {len(vectors)}")
    if labels is not None and len(labels) != len(vectors):
        raise UsageError(f"labels has {len(labels)} rows, vectors {len(vectors)}")
    if groups is not None:
        groups = np.asarray(groups, dtype=np.int64)
        if len(groups) != len(vectors):
            raise UsageError(f"groups has {len(groups)} rows, vectors {len(vectors)}")
    ctx = FnContext(
        vectors=vectors,
        labels=labels,
        sources=sources,
        groups=groups,
        file_sha256=file_sha256,
        views=None if views is None else np.asarray(views),
        seed=seed,
        neighbours=neighbours,
    )
    if neighbours is not None and (
        neighbours[0].shape != neighbours[1].shape or len(neighbours[0]) != len(vectors)
    ):
        raise UsageError(
            f"neighbours must be two ({len(vectors)}, m) arrays, got "
            f"{neighbours[0].shape} and {neighbours[1].shape}"
        )
    if "label" in config.rules:
        label_codes(ctx)
    if "cluster" in config.rules:
        cluster_assignments(ctx, config)
    if "support" in config.rules or "near-duplicate" in config.rules:
        source_views(ctx)
    if "community" in config.rules:
        community_labels(ctx, config)
    return ctx


# -- context pieces, computed once --------------------------------------------------
def label_codes(ctx: FnContext) -> np.ndarray | None:
    """int64 code per item (-1 where the label is missing), or None without labels."""
    if ctx.labels is None:
        return None
    if ctx.label_codes is None:
        import pandas as pd

        codes, _ = pd.factorize(pd.Series(ctx.labels, dtype=object), use_na_sentinel=True)
        ctx.label_codes = codes.astype(np.int64)
    return ctx.label_codes


def cluster_ks(n: int, config: FalseNegativeConfig) -> tuple[int, ...]:
    """Cluster counts for ``n`` items, one per granularity."""
    from pairkit.mine.clusters import cluster_counts

    if config.cluster_ks:
        return tuple(min(n, k) for k in config.cluster_ks)
    return cluster_counts(n, config.cluster_sizes)


def cluster_assignments(ctx: FnContext, config: FalseNegativeConfig) -> np.ndarray:
    """(G, N) int64: spherical k-means cluster of each item at each granularity."""
    from pairkit.mine.clusters import spherical_kmeans

    ks = cluster_ks(ctx.count, config)
    key = ("cluster", ks, config.cluster_niter)
    given = ctx.cluster_assign is not None and "cluster_key" not in ctx.cache
    if not given and ctx.cache.get("cluster_key") != key:
        rows = [
            spherical_kmeans(ctx.vectors, k, seed=ctx.seed + g, niter=config.cluster_niter)[0]
            for g, k in enumerate(ks)
        ]
        ctx.cluster_assign = np.stack(rows) if rows else np.zeros((0, ctx.count), np.int64)
        ctx.cache["cluster_key"] = key
    return ctx.cluster_assign


def community_labels(ctx: FnContext, config: FalseNegativeConfig) -> np.ndarray:
    """(N,) int64 community of each item in the kNN graph (``community_neighbors``
    nearest other sources, weighted by similarity), by label propagation."""
    from pairkit.mine.clusters import knn_graph, label_propagation

    if ctx.communities is None:
        m = config.community_neighbors
        if ctx.neighbours is not None and ctx.neighbours[0].shape[1] >= m:
            nb, w = ctx.neighbours[0][:, :m], ctx.neighbours[1][:, :m]
        else:
            nb, w = knn_graph(ctx.vectors, ctx.sources, m)
        ctx.communities = label_propagation(
            np.asarray(nb, dtype=np.int64), np.asarray(w, dtype=np.float32),
            iters=config.community_iters, seed=ctx.seed,
        )
    return ctx.communities


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


def near_duplicate_threshold(config: FalseNegativeConfig) -> float:
    """The cosine threshold of the near-duplicate rule: the config's, else
    ``pairkit dedup``'s measured default."""
    if config.near_duplicate_threshold is not None:
        return float(config.near_duplicate_threshold)
    try:
        from pairkit.mine.near_duplicates import DEFAULT_THRESHOLD
    except ImportError:
        return _NEAR_DUPLICATE_FALLBACK
    return float(DEFAULT_THRESHOLD)


def near_duplicate_group_ids(ctx: FnContext, config: FalseNegativeConfig) -> np.ndarray | None:
    """Near-duplicate group per item ((N,) int64, -1 none), or None when
    ``pairkit.mine.near_duplicates`` is not available (the rule then falls back
    to a similarity threshold)."""
    if ctx.groups is not None:
        return ctx.groups
    try:
        from pairkit.mine.near_duplicates import near_duplicate_groups
    except ImportError:
        return None
    ctx.groups = np.asarray(
        near_duplicate_groups(
            ctx.vectors,
            near_duplicate_threshold(config),
            file_sha256=ctx.file_sha256,
            sources=ctx.sources,
            views=ctx.views,
        ),
        dtype=np.int64,
    )
    return ctx.groups


# -- the rules ----------------------------------------------------------------------
def _padded(rows: list[np.ndarray] | None, n: int) -> np.ndarray:
    """List of n int arrays -> (n, max_len) int64, -1 padded (at least one column)."""
    if rows is None:
        return np.full((n, 1), -1, dtype=np.int64)
    if len(rows) != n:
        raise UsageError(f"positives has {len(rows)} rows, anchors {n}")
    width = max([len(r) for r in rows] + [1])
    out = np.full((n, width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _block_rows(k: int, m: int, d: int) -> int:
    return max(1, _BLOCK_BYTES // max(1, 4 * (k + m) * d))


def _similarity_to_rows(
    vectors: np.ndarray, rows: np.ndarray, cand: np.ndarray
) -> np.ndarray:
    """(n, m, k) float32 inner products of ``vectors[rows]`` (n, m) and
    ``vectors[cand]`` (n, k); entries where a row id is -1 are NaN."""
    n, m = rows.shape
    k = cand.shape[1]
    d = vectors.shape[1]
    out = np.empty((n, m, k), dtype=np.float32)
    step = _block_rows(k, m, d)
    for s in range(0, n, step):
        r = rows[s : s + step]
        c = cand[s : s + step]
        xr = vectors[np.maximum(r, 0)]
        xc = vectors[np.maximum(c, 0)]
        sim = np.matmul(xr, xc.transpose(0, 2, 1)).astype(np.float32, copy=False)
        sim[np.broadcast_to((r < 0)[:, :, None], sim.shape)] = np.nan
        out[s : s + step] = sim
    return out


def rule_label(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """(n, k) bool: candidate has the anchor's (non-missing) label."""
    codes = label_codes(ctx)
    if codes is None:
        return np.zeros(cand.shape, dtype=bool)
    a = codes[anchors][:, None]
    c = codes[np.maximum(cand, 0)]
    return (cand >= 0) & (a >= 0) & (a == c)


def _positive_rows(
    ctx: FnContext, anchors: np.ndarray, positives: list[np.ndarray] | None
) -> np.ndarray:
    """(n, p) positives per anchor, -1 padded; without ``positives``: the other
    views of the anchor's source (the instance relation)."""
    if positives is not None:
        return _padded([np.asarray(p, dtype=np.int64) for p in positives], len(anchors))
    views = source_views(ctx)[ctx.sources[anchors]]
    return np.where(views == anchors[:, None], -1, views)


def rule_near_duplicate(
    ctx: FnContext,
    anchors: np.ndarray,
    cand: np.ndarray,
    scores: np.ndarray,
    config: FalseNegativeConfig,
    positives: list[np.ndarray] | None,
) -> np.ndarray:
    """(n, k) bool: candidate in the near-duplicate group of the anchor or of a
    positive. Without groups: cosine to the anchor or a positive >= threshold."""
    valid = cand >= 0
    pos = _positive_rows(ctx, anchors, positives)
    groups = near_duplicate_group_ids(ctx, config)
    if groups is not None:
        gc = groups[np.maximum(cand, 0)]
        ga = groups[anchors][:, None]
        flag = (ga >= 0) & (ga == gc)
        gp = np.where(pos >= 0, groups[np.maximum(pos, 0)], -1)  # (n, p)
        for j in range(gp.shape[1]):
            g = gp[:, j : j + 1]
            flag |= (g >= 0) & (g == gc)
        return valid & flag
    thr = near_duplicate_threshold(config)
    flag = scores >= thr
    if pos.shape[1] and (pos >= 0).any():
        sim = _similarity_to_rows(ctx.vectors, pos, cand)
        with np.errstate(invalid="ignore"):
            flag |= (np.nan_to_num(sim, nan=-np.inf) >= thr).any(axis=1)
    return valid & flag


def rule_margin(
    cand: np.ndarray, scores: np.ndarray, pos_scores: np.ndarray, margin: float
) -> np.ndarray:
    """(n, k) bool: score > pos - (1 - margin) * |pos| (= margin * pos when pos > 0).

    The threshold stays below the positive score when it is <= 0; anchors with
    a non-finite positive score (no positive) flag nothing.
    """
    pos = np.asarray(pos_scores, dtype=np.float64)[:, None]
    finite = np.isfinite(pos)
    # compared in float32, the scores' precision, so a score equal to the
    # threshold (as the user would compute it) counts as a tie, not above it
    with np.errstate(invalid="ignore"):
        thr = np.where(finite, pos - (1.0 - margin) * np.abs(pos), np.inf).astype(np.float32)
    return (cand >= 0) & finite & (np.asarray(scores, dtype=np.float32) > thr)


def rule_cluster(
    ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, config: FalseNegativeConfig
) -> np.ndarray:
    """(n, k) bool: candidate shares the anchor's cluster in >= votes granularities."""
    assign = cluster_assignments(ctx, config)
    safe = np.maximum(cand, 0)
    votes = np.zeros(cand.shape, dtype=np.int32)
    for g in range(assign.shape[0]):
        votes += assign[g][anchors][:, None] == assign[g][safe]
    return (cand >= 0) & (votes >= min(config.cluster_votes, max(assign.shape[0], 1)))


def rule_community(
    ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, config: FalseNegativeConfig
) -> np.ndarray:
    """(n, k) bool: candidate in the anchor's kNN-graph community.

    Label propagation can flood a weakly separated graph into one giant
    community; a community holding more than ``community_max_share`` of the
    items says nothing about "same thing", so its anchors get no flags here.
    """
    comm = community_labels(ctx, config)
    sizes = np.bincount(comm, minlength=int(comm.max()) + 1 if len(comm) else 0)
    trusted = sizes[comm[anchors]] <= config.community_max_share * len(comm)
    same = comm[anchors][:, None] == comm[np.maximum(cand, 0)]
    return (cand >= 0) & same & trusted[:, None]


def support_scores(
    ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, config: FalseNegativeConfig
) -> np.ndarray:
    """(n, k) float32: candidate's similarity to the anchor's support views
    (views of its source; the anchor itself too if ``support_include_anchor``),
    aggregated by max or mean; -inf for padding or an empty support set."""
    views = source_views(ctx)[ctx.sources[anchors]]
    if not config.support_include_anchor:
        views = np.where(views == anchors[:, None], -1, views)
    sim = _similarity_to_rows(ctx.vectors, views, cand)  # (n, m, k)
    present = (views >= 0)[:, :, None]
    if config.support_aggregate == "max":
        agg = np.where(present, sim, -np.inf).max(axis=1)
    else:
        count = present.sum(axis=1)
        total = np.where(present, sim, 0.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            agg = np.where(count > 0, total / np.maximum(count, 1), -np.inf)
    return np.where(cand >= 0, agg, -np.inf).astype(np.float32)


def rule_support(
    ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, config: FalseNegativeConfig
) -> np.ndarray:
    """(n, k) bool: aggregated support similarity >= threshold and, if
    ``support_top`` > 0, among the anchor's ``support_top`` highest by it
    (ties at the cut are all kept in)."""
    agg = support_scores(ctx, anchors, cand, config)
    flag = (cand >= 0) & (agg >= config.support_threshold)
    top = config.support_top
    if top and top < cand.shape[1]:
        kth = -np.partition(-agg, top - 1, axis=1)[:, top - 1 : top]
        flag &= agg >= kth
    return flag


def flag_false_negatives(
    ctx: FnContext,
    anchors: np.ndarray,
    cand_ids: np.ndarray,
    cand_scores: np.ndarray,
    pos_scores: np.ndarray,
    config: FalseNegativeConfig,
    positives: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Flag likely false negatives among each anchor's candidates.

    ``anchors`` (n,) row ids; ``cand_ids`` (n, k) int64 candidate rows, -1
    padded; ``cand_scores`` (n, k) their similarity to the anchor;
    ``pos_scores`` (n,) the anchor's weakest positive score (non-finite: no
    positive); ``positives`` optional list of n arrays of positive rows
    (default: the other views of the anchor's source).

    Returns ``(flags, reasons)``: bool (n, k), and object (n, k) holding the
    names of the rules that fired joined with ``|`` (None where not flagged).
    Padding (-1) is never flagged.
    """
    anchors = np.asarray(anchors, dtype=np.int64)
    cand = np.asarray(cand_ids, dtype=np.int64)
    scores = np.asarray(cand_scores, dtype=np.float32)
    n = len(anchors)
    if cand.ndim != 2 or cand.shape[0] != n:
        raise UsageError(f"cand_ids must have shape ({n}, k), got {cand.shape}")
    if scores.shape != cand.shape:
        raise UsageError(f"cand_scores shape {scores.shape} != cand_ids shape {cand.shape}")
    if len(pos_scores) != n:
        raise UsageError(f"pos_scores has {len(pos_scores)} rows, anchors {n}")
    if n and (cand.max(initial=-1) >= ctx.count or anchors.max() >= ctx.count):
        raise UsageError(f"row ids must be < {ctx.count} (the store's row count)")
    masks: list[np.ndarray] = []
    for rule in config.rules:
        if rule == "label":
            masks.append(rule_label(ctx, anchors, cand))
        elif rule == "near-duplicate":
            masks.append(rule_near_duplicate(ctx, anchors, cand, scores, config, positives))
        elif rule == "margin":
            masks.append(rule_margin(cand, scores, pos_scores, config.margin))
        elif rule == "cluster":
            masks.append(rule_cluster(ctx, anchors, cand, config))
        elif rule == "support":
            masks.append(rule_support(ctx, anchors, cand, config))
        elif rule == "community":
            masks.append(rule_community(ctx, anchors, cand, config))
        else:  # pragma: no cover - validated in the config
            raise UsageError(f"unknown false-negative rule {rule!r}")
    if config.trust_labels and "label" in config.rules:
        codes = label_codes(ctx)
        if codes is not None:
            both = (codes[anchors][:, None] >= 0) & (codes[np.maximum(cand, 0)] >= 0)
            for i, rule in enumerate(config.rules):
                if rule in SIMILARITY_RULES:
                    masks[i] = masks[i] & ~both
    return combine_reasons(masks, [REASONS[r] for r in config.rules], cand.shape)


def combine_reasons(
    masks: list[np.ndarray], names: list[str], shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """OR of ``masks`` (each bool ``shape``) and, per cell, the fired ``names``
    joined with ``|`` (None where none fired). Returns ``(flags, reasons)``."""
    code = np.zeros(shape, dtype=np.int16)
    for bit, mask in enumerate(masks):
        code |= mask.astype(np.int16) << bit
    flags = code > 0
    # one string per combination of fired rules (2 ** rules of them), looked up by code
    table = np.empty(1 << len(names), dtype=object)
    for c in range(len(table)):
        fired = [names[b] for b in range(len(names)) if (c >> b) & 1]
        table[c] = "|".join(fired) if fired else None
    return flags, table[code]
