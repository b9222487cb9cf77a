"""Data issues found on the kNN graph, one module per detector (like ``pairkit/mine/rules``).

Every detector module has ``NAME`` (as on the command line), ``NEEDS_LABELS`` (True when
it judges labels), and ``detect(graph, labels, config) -> Detection``: a score per row
(higher = more likely an issue), a flag per row, and a reason per flagged row. ``graph``
is a :class:`pairkit.eval.data_issues.KnnGraph` (each source's k nearest other sources),
``labels`` (N,) int64 codes (-1 missing) or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np


@dataclass(frozen=True)
class Detection:
    """``score`` (N,) float64, higher = more likely an issue; ``flag`` (N,) bool;
    ``reason`` (N,) object, a sentence where flagged, None elsewhere; ``suggested`` (N,)
    int64 label code the neighbours suggest (-1: none or not a label check)."""

    score: np.ndarray
    flag: np.ndarray
    reason: np.ndarray
    suggested: np.ndarray


from pairkit.eval.issues import label_error, outlier  # noqa: E402

MODULES: dict[str, ModuleType] = {m.NAME: m for m in (outlier, label_error)}
