"""Measured thresholds shared by commands (no imports: the CLI shows them in ``--help``)."""

from __future__ import annotations

# Cosine at or above which two items are near-duplicates: ``dedup --threshold`` and the
# ``near-duplicate`` false-negative rule of ``mine`` (``--fn-near-dup-threshold``).
# Measured on the planted-copy benchmark (tests/benchmarks/near_duplicates.py,
# docs/benchmarks.md) with the offline ``pixels`` encoder.
NEAR_DUPLICATE_THRESHOLD = 0.965
