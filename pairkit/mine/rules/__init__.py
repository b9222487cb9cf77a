"""The false-negative rules, one module each (like ``pairkit/train/losses/``).

Every rule module has ``NAME`` (as on the command line), ``REASON`` (as written
in ``fn_reason``), ``SIMILARITY`` (True when it judges by embeddings, so trusted
labels overrule it), an optional ``prepare(ctx, config)`` that computes what it
needs once per run, and ``flag(ctx, anchors, cand, scores, pos_scores, config,
positives) -> (n, k) bool``. Padding (-1 candidates) is never flagged.
"""

from __future__ import annotations

from types import ModuleType

from pairkit.mine.rules import cluster, community, label, margin, mutual, near_duplicate

MODULES: dict[str, ModuleType] = {
    m.NAME: m for m in (label, near_duplicate, mutual, margin, cluster, community)
}
