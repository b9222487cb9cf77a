"""Outliers and likely label errors of a set of vectors from its kNN graph
(:func:`find_issues`, what ``pairkit issues`` runs: :mod:`pairkit.eval.issues_command`),
and the graph itself in the sparse form cleanlab's ``Datalab`` takes (``to_csr``).

One node per source (its lowest view, as in ``dedup``): views of one source are never
each other's neighbours. The detectors are :mod:`pairkit.eval.issues`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    pass

DEFAULT_K = 10
DEFAULT_CHECKS = ("outlier", "label-error")
COLUMNS = ("id", "path", "label", "issue", "score", "flagged", "suggested_label", "reason")


@dataclass(frozen=True)
class KnnGraph:
    """Each row's ``k`` nearest other rows: ``ids`` (N, k) int64, -1 padded;
    ``similarities`` (N, k) float32 inner products, best first (-inf padding);
    ``distances`` = ``1 - similarities`` clipped at 0 (+inf padding)."""

    ids: np.ndarray
    similarities: np.ndarray

    @property
    def distances(self) -> np.ndarray:
        d = np.maximum(1.0 - self.similarities.astype(np.float64), 0.0)
        return np.where(self.ids >= 0, d, np.inf)


@dataclass(frozen=True)
class IssuesConfig:
    """Options of ``pairkit issues``."""

    k: int = DEFAULT_K
    # None: the default, DEFAULT_CHECKS on a labelled store and outlier only on another
    checks: tuple[str, ...] | None = None
    outlier_z: float = 3.5
    all_rows: bool = False
    knn_graph: str | None = None  # write the graph here (.npz)
    # the cosine difference the vectors' dtype resolves (SELF_SIMILARITY_SLACK: 0.002 on
    # float16): the outlier scale's floor; find_issues sets it from the vectors' dtype
    resolution: float = 0.0


def knn_graph(vectors: np.ndarray, k: int, backend: Any = None,
              progress: Callable[[int], None] | None = None,
              on_start: Callable[[int], None] | None = None) -> KnnGraph:
    """The exact ``k``-nearest-neighbour graph of ``vectors`` (N, d) (one row per source).
    ``on_start(N)`` before the search, ``progress(m)`` after each block of ``m`` rows
    (they add up to N)."""
    from pairkit.mine.clusters import knn_graph as search

    if on_start is not None:
        on_start(len(vectors))
    ids, sims = search(np.ascontiguousarray(vectors, dtype=np.float32),
                       np.arange(len(vectors), dtype=np.int64), k, backend=backend,
                       progress=progress)
    return KnnGraph(ids, sims)


def to_csr(graph: KnnGraph) -> Any:
    """(N, N) ``scipy.sparse.csr_matrix`` of cosine distances, row i holding its k
    nearest rows in ascending distance, explicit zeros kept (cleanlab's ``knn_graph``:
    ``Datalab.find_issues(knn_graph=...)``). Rows need all k neighbours."""
    from scipy.sparse import csr_matrix

    n, k = graph.ids.shape
    if (graph.ids < 0).any():
        raise PairkitError(f"the kNN graph needs {k} neighbours per row; some rows have "
                           "fewer (use a smaller --k)")
    dist = graph.distances
    order = np.argsort(dist, axis=1, kind="stable")
    indices = np.take_along_axis(graph.ids, order, axis=1).ravel()
    data = np.take_along_axis(dist, order, axis=1).ravel()
    indptr = np.arange(0, n * k + 1, k, dtype=np.int64)
    return csr_matrix((data, indices, indptr), shape=(n, n))


# what each detector looks for, as the phase line says it
CHECK_NAMES = {"outlier": "outliers", "label-error": "label errors"}


def find_issues(vectors: np.ndarray, labels: np.ndarray | None, *,
                checks: Sequence[str] = DEFAULT_CHECKS, k: int = DEFAULT_K,
                outlier_z: float = 3.5, backend: Any = None, stored_as: str | None = None,
                progress: Callable[[int], None] | None = None,
                on_start: Callable[[int], None] | None = None,
                on_phase: Callable[[str], None] | None = None
                ) -> tuple[dict[str, Any], KnnGraph, np.ndarray | None]:
    """Run the detectors on one row per source.

    ``vectors`` (N, d) L2-normalised, ``labels`` (N,) label names (None/NaN missing) or
    None; ``stored_as``: the dtype the vectors were stored in (None: their own), whose
    rounding sets the outlier scale's floor; ``on_start``/``progress``: the kNN search's
    progress hook (:func:`knn_graph`: sources, then sources per block); ``on_phase(line)``
    as each detector starts (after the search). Returns
    ``({check: Detection}, graph, label names by code or None)``.
    """

    from pairkit.eval.issues import MODULES
    from pairkit.mine.thresholds import SELF_SIMILARITY_SLACK

    check_issue_options(checks, k, outlier_z, labels is not None)
    n = len(vectors)
    if n < 2:
        raise PairkitError(f"issues needs at least 2 sources, the store has {n}")
    graph = knn_graph(vectors, min(k, n - 1), backend, progress, on_start)
    codes, names = None, None
    if labels is not None:
        from pairkit.core.store import codes_of

        codes, names = codes_of(labels)
    dtype = str(np.dtype(vectors.dtype) if stored_as is None else stored_as)
    cfg = IssuesConfig(k=k, checks=tuple(checks), outlier_z=outlier_z,
                       resolution=SELF_SIMILARITY_SLACK.get(dtype, 2e-3))
    found = {}
    for c in checks:
        if on_phase is not None:
            on_phase(f"checking {CHECK_NAMES.get(c, c)} among {n:,} sources")
        found[c] = MODULES[c].detect(graph, codes, cfg)
    return found, graph, names


def check_issue_options(checks: Sequence[str], k: int, outlier_z: float,
                        has_labels: bool) -> None:
    """UsageError for an unknown check, k < 1, outlier_z <= 0, or label-error without
    labels."""
    from pairkit.eval.issues import MODULES

    for c in checks:
        if c not in MODULES:
            raise UsageError(f"--checks: unknown check {c!r}; one of {', '.join(MODULES)}")
    if not checks:
        raise UsageError("--checks needs at least one check")
    if k < 1:
        raise UsageError(f"--k must be >= 1, got {k}")
    if not outlier_z > 0:
        raise UsageError(f"--outlier-z must be > 0, got {outlier_z:g}")
    if not has_labels and any(MODULES[c].NEEDS_LABELS for c in checks):
        raise UsageError("label-error needs labels and the store has none: embed with "
                         "--labels, or use --checks outlier")
