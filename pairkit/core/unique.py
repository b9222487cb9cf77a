"""Distinct values of a large integer array by a sort.

numpy 2.4's ``np.unique(x)`` (no ``return_*`` options) takes a hash-based path that is
~70x slower than a sort on millions of distinct int64 keys (2,000,000 random keys:
2.1 s against 0.03 s of CPU, one thread; docs/benchmarks.md "Downstream"). The pair keys of
``mine``'s mutual-neighbour lists are such arrays (N x m distinct keys).
"""

from __future__ import annotations

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` (flattened), ascending: ``np.unique(values)``."""
    flat = np.sort(np.asarray(values).ravel())
    if len(flat) == 0:
        return flat
    return flat[np.r_[True, flat[1:] != flat[:-1]]]
