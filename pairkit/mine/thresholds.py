"""Measured thresholds shared by commands (no imports: the CLI shows them in ``--help``)."""

from __future__ import annotations

# Cosine at or above which two items are near-duplicates: ``dedup --threshold`` and the
# ``near-duplicate`` false-negative rule of ``mine`` (``--fn-near-dup-threshold``).
# Measured on the planted-copy benchmark (tests/benchmarks/near_duplicates.py,
# docs/benchmarks.md) with the offline ``pixels`` encoder.
NEAR_DUPLICATE_THRESHOLD = 0.965

# how far below 1 an L2-normalised row's inner product with itself can come out, by the
# store's dtype (float16 rounding: ~5e-4 per value; float32 sums: ~5e-7 at 1,280 dims)
SELF_SIMILARITY_SLACK = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12}


def reachable(threshold: float, dtype: str) -> float:
    """``threshold`` as the stored rows of ``dtype`` can meet it: at most 1 less the
    slack by which two identical rows' inner product may fall short of 1 (so ``-t 1``,
    identical vectors, finds them on every dtype and search backend: ``dedup`` and the
    ``near-duplicate`` rule of ``mine``)."""
    return min(threshold, 1.0 - SELF_SIMILARITY_SLACK.get(str(dtype), 2e-3))
