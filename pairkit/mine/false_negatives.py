"""Flag likely false negatives among mined candidates.

A false negative is a candidate negative that is really the same thing as the
anchor (same class, or a near-duplicate). Each rule looks at the anchor, its
candidate negatives and (where needed) its positives, and flags some
candidates; a candidate is flagged when any chosen rule flags it. One module per
rule in :mod:`pairkit.mine.rules`; methods, sources and measurements:
docs/methods.md ("False negatives") and docs/benchmarks.md.

Rules (names as on the command line, reasons as written in ``fn_reason``):

- ``label`` (reason ``label``): candidate has the anchor's label.
- ``near-duplicate`` (``near_duplicate``): candidate is in the near-duplicate
  group of the anchor or of one of its positives.
- ``cluster`` (``cluster``): candidate shares the anchor's cluster in at least
  ``cluster_votes`` of ``cluster_runs`` seeded k-means runs on the spectral
  embedding of the kNN graph (consensus clustering; the number of clusters is
  read off the graph's spectrum unless ``cluster_ks`` is given), or its cosine to
  the anchor in that embedding's diffusion coordinates is at least
  ``cluster_diffusion``.
- ``margin`` (``margin``): candidate score above ``margin`` of the positive
  score (the percent-of-positive rule).
- ``community`` (``community``): candidate is in the anchor's community of the
  kNN graph (weighted label propagation over each item's nearest other
  sources).

Everything is vectorised over anchors and processed in blocks; nothing is
N x N.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pairkit.errors import UsageError
from pairkit.mine.fn_context import FnContext, label_codes
from pairkit.mine.rules import MODULES

__all__ = ["DEFAULT_RULES", "RULES", "FalseNegativeConfig", "FnContext", "build_context",
           "flag_false_negatives", "parse_rules"]

RULES: tuple[str, ...] = tuple(MODULES)
REASONS: dict[str, str] = {name: m.REASON for name, m in MODULES.items()}
# Rules that judge by similarity; with trust_labels, labeled pairs skip them.
SIMILARITY_RULES: tuple[str, ...] = tuple(n for n, m in MODULES.items() if m.SIMILARITY)
# Chosen by measurement on real images: docs/benchmarks.md ("False negatives").
DEFAULT_RULES: tuple[str, ...] = ("label", "near-duplicate", "mutual-neighbour", "cluster")
# rules that were measured and removed: the one-line reason an old spelling gets
REMOVED_RULES: dict[str, str] = {
    "support": "the support rule (false-negative cancellation) was removed: on real images "
               "it left 0.30-0.71 of negatives same-class and cost 2.6-22x naive mining "
               "(docs/benchmarks.md); use cluster",
}


# without the diffusion threshold, two of the cluster rule's runs must agree: one run's
# arbitrary border is not enough; with it (the default), every run must (the border
# cases are the threshold's) (docs/methods.md, the cluster rule)
DEFAULT_CLUSTER_VOTES = 2
# the cluster rule's diffusion-cosine threshold (docs/benchmarks.md, 2026-12-05: on six
# long-tailed real sets it kept 1.15-1.29x the useful hard negatives of 2 of 8 votes, the
# false-negative share at most 0.48x naive's; 0.4 since the graph is built in
# view-whitened components, 2026-12-07: "The cluster rule's graph in view-whitened
# components")
DEFAULT_CLUSTER_DIFFUSION = 0.4


@dataclass(frozen=True)
class FalseNegativeConfig:
    """Which rules flag false negatives, and each rule's parameters.

    ``cluster_ks``: cluster counts of the ``cluster`` rule's k-means runs (empty:
    chosen per store from the kNN graph's spectrum); each count is run
    ``cluster_runs`` times with other seeds, and a candidate is flagged when it
    shares the anchor's cluster in at least ``cluster_votes`` runs, or when its cosine
    to the anchor in the spectral embedding's diffusion coordinates is at least
    ``cluster_diffusion`` (0: no such threshold); more votes (and a higher threshold)
    are required when that flags more than ``cluster_max_share`` of random pairs (the
    rule is off when even all runs do: the clusters hold no class structure).
    ``cluster_votes`` 0 (the default): every run with the diffusion threshold, else
    :data:`DEFAULT_CLUSTER_VOTES` (both capped at the runs).
    ``trust_labels``: with the ``label`` rule on, a pair whose anchor and
    candidate both carry a label is decided by the labels (and near-duplicate
    groups) alone; the similarity rules (margin, cluster, community)
    judge only pairs with a missing label.
    """

    rules: tuple[str, ...] = DEFAULT_RULES
    margin: float = 0.95
    near_duplicate_threshold: float | None = None  # None: `pairkit dedup`'s default
    # threshold: the embedding cosine (fast); pixels / auto: dedup's check of the images
    # (decodes and aligns every candidate pair: minutes per 10,000 images on a CPU)
    near_duplicate_method: str = "threshold"
    cluster_ks: tuple[int, ...] = ()
    cluster_runs: int = 8
    cluster_votes: int = 0  # of cluster_runs_total; 0: chosen by cluster_diffusion
    cluster_diffusion: float = DEFAULT_CLUSTER_DIFFUSION  # 0: votes alone
    cluster_niter: int = 20
    cluster_neighbours: int = 15  # kNN graph of the spectral embedding
    cluster_eigen_threshold: float = 0.93  # clusters = graph eigenvalues >= this
    # the most of all random pairs the rule may flag: more votes are required until it
    # flags no more, and with every run required and still more, the rule is off
    cluster_max_share: float = 0.5
    community_neighbours: int = 15
    community_iters: int = 50
    community_max_share: float = 0.9  # a community holding more of the items flags nothing
    trust_labels: bool = True
    # cluster_votes was 0 (the default, resolved below): runs set by hand, which have no
    # diffusion coordinates, then take DEFAULT_CLUSTER_VOTES (rules.cluster.choose_votes);
    # an init field so that dataclasses.replace keeps it
    cluster_votes_default: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.cluster_votes == 0:  # the default: fits fewer runs too
            votes = (self.cluster_runs_total if self.cluster_diffusion > 0
                     else min(DEFAULT_CLUSTER_VOTES, self.cluster_runs_total))
            object.__setattr__(self, "cluster_votes", votes)
            object.__setattr__(self, "cluster_votes_default", True)
        validate_config(self)

    @property
    def cluster_runs_total(self) -> int:
        """Number of k-means runs that vote (cluster counts x runs each)."""
        return max(1, len(self.cluster_ks)) * self.cluster_runs


def validate_config(config: FalseNegativeConfig) -> None:
    """Raise :class:`UsageError` with a one-line reason for a bad config."""
    for rule in config.rules:
        _check_rule(rule)
    if len(set(config.rules)) != len(config.rules):
        raise UsageError(f"false-negative rules repeat: {','.join(config.rules)}")
    if not 0.0 < config.margin <= 1.0:
        raise UsageError(f"--fn-margin must be in (0, 1], got {config.margin}")
    if config.near_duplicate_method not in ("threshold", "pixels", "auto"):
        raise UsageError("near-duplicate method must be threshold, pixels or auto, got "
                         f"{config.near_duplicate_method}")
    t = config.near_duplicate_threshold
    if t is not None and not 0.0 < t <= 1.0:
        raise UsageError(f"--fn-near-dup-threshold must be in (0, 1], got {t}")
    if any(k < 2 for k in config.cluster_ks):
        raise UsageError("--fn-cluster-k: cluster counts must be >= 2, got "
                         f"{','.join(map(str, config.cluster_ks))}")
    if config.cluster_runs < 1:
        raise UsageError(f"--fn-cluster-runs must be >= 1, got {config.cluster_runs}")
    total = config.cluster_runs_total
    if not 1 <= config.cluster_votes <= total:
        raise UsageError(
            f"--fn-cluster-votes must be between 1 and the number of runs ({total}: "
            f"--fn-cluster-k counts x --fn-cluster-runs), "
            f"got {config.cluster_votes}"
        )
    if not 0.0 <= config.cluster_diffusion <= 1.0:
        raise UsageError("--fn-cluster-diffusion must be in [0, 1] (0: off), got "
                         f"{config.cluster_diffusion}")
    if not 0.0 < config.cluster_max_share <= 1.0:
        raise UsageError("cluster max share must be in (0, 1], got "
                         f"{config.cluster_max_share}")
    if config.cluster_neighbours < 1:
        raise UsageError(f"cluster neighbours must be >= 1, got {config.cluster_neighbours}")
    if not 0.0 < config.cluster_eigen_threshold < 1.0:
        raise UsageError("cluster eigen threshold must be in (0, 1), got "
                         f"{config.cluster_eigen_threshold}")
    if config.cluster_niter < 1:
        raise UsageError(f"cluster iterations must be >= 1, got {config.cluster_niter}")
    if config.community_neighbours < 1:
        raise UsageError(f"--fn-community-neighbours must be >= 1, got "
                         f"{config.community_neighbours}")
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
        _check_rule(rule)
    return rules


def _check_rule(rule: str) -> None:
    if rule in REMOVED_RULES:
        raise UsageError(REMOVED_RULES[rule])
    if rule not in RULES:
        raise UsageError(f"unknown false-negative rule {rule!r}; choose from {', '.join(RULES)}")


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
    backend: Any = None,
    paths: np.ndarray | None = None,
    image_root: str | None = None,
    image_column: str | None = None,
    whitened_neighbours: tuple[np.ndarray, np.ndarray] | None = None,
    principal: Any = None,
    spectral: Any = None,
    dtype: str = "float32",
) -> FnContext:
    """An :class:`FnContext` with what ``config``'s rules need computed (each rule's
    ``prepare``); near-duplicate groups are computed on first use unless given.
    ``backend`` (a :class:`pairkit.index.backend.SearchBackend`; None: FAISS on the CPU)
    runs the rules' searches and k-means. ``paths`` (N,) and ``image_root``: the store's
    images, for the near-duplicate decision's pixel check (``image_column``: a dataset
    store's, :func:`pairkit.encode.item_images.image_column_of`). ``whitened_neighbours``: the
    mutual-neighbour rule's lists (:func:`pairkit.mine.whitening.whitened_neighbours`)
    when the caller searched them already, ``principal`` their whitening's fit
    (:class:`pairkit.mine.whitening.Whitening`: the principal components the ``cluster``
    rule's graph starts from too); ``spectral``: the ``cluster`` rule's spectral
    embedding when the caller made it (:mod:`pairkit.mine.white_parts`). ``vectors`` may
    be rows read as float32 when used (a :class:`~pairkit.core.row_view.RowView`: kept as
    it is); ``dtype`` the store's, as its rows were stored (``float16`` identical rows
    come out ~1e-3 short of 1: the near-duplicate threshold is met as ``dedup`` meets it)."""
    from pairkit.core.row_view import is_view
    from pairkit.index.search import as_float32

    if not is_view(vectors):
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
    if neighbours is not None and (
        neighbours[0].shape != neighbours[1].shape or len(neighbours[0]) != len(vectors)
    ):
        raise UsageError(
            f"neighbours must be two ({len(vectors)}, m) arrays, got "
            f"{neighbours[0].shape} and {neighbours[1].shape}"
        )
    ctx = FnContext(vectors=vectors, labels=labels, sources=sources, groups=groups,
                    file_sha256=file_sha256, views=None if views is None else np.asarray(views),
                    seed=seed, neighbours=neighbours, backend=backend,
                    paths=None if paths is None else np.asarray(paths, dtype=object),
                    image_root=image_root, image_column=image_column,
                    whitened_neighbours=whitened_neighbours, principal=principal,
                    spectral=spectral, dtype=str(dtype))
    for rule in config.rules:
        prepare = getattr(MODULES[rule], "prepare", None)
        if prepare is not None:
            prepare(ctx, config)
    return ctx


def flag_false_negatives(
    ctx: FnContext,
    anchors: np.ndarray,
    cand_ids: np.ndarray,
    cand_scores: np.ndarray,
    pos_scores: np.ndarray,
    config: FalseNegativeConfig,
    positives: np.ndarray | list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Flag likely false negatives among each anchor's candidates.

    ``anchors`` (n,) row ids; ``cand_ids`` (n, k) int64 candidate rows, -1
    padded; ``cand_scores`` (n, k) their similarity to the anchor;
    ``pos_scores`` (n,) the anchor's weakest positive score (non-finite: no
    positive); ``positives`` optional (n, p) positive rows, -1 padded, or a list of n
    arrays of positive rows (default: the other views of the anchor's source).

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
    masks = [MODULES[rule].flag(ctx, anchors, cand, scores, pos_scores, config, positives)
             for rule in config.rules]
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
