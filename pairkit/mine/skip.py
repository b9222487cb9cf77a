"""Which rows an anchor's search may skip because the false-negative rules would drop them.

Skipping is exact only when every candidate skipped would be flagged and dropped anyway:
hard mining with flagged candidates eliminated (not kept or attracted), and either

- the ``label`` rule trusted with every row labeled (more than one label): the labels
  decide every pair, so the rows of the anchor's label are not searched (without this, a
  class of many rows sends each anchor's search ever deeper for its first candidate of
  another class); or
- the ``cluster`` rule on (and not turned off by its random-pair guard, see
  :func:`pairkit.mine.rules.cluster.choose_votes`): the rows sharing the anchor's cluster
  in at least the rule's votes of the runs, or at the rule's diffusion cosine to it, are
  not searched.

The search itself is :func:`pairkit.index.outside.outside_searcher`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.mine.config import MineConfig

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.fn_context import FnContext


# The searches skip a row at a diffusion cosine >= threshold + this, not >= threshold:
# they compute the cosine as a matrix product (on a GPU too, where float32 products may
# run in TF32), the rule's flag as a row-wise sum, and at a cosine within rounding of the
# threshold the two can disagree. A row in the margin is searched, then flagged, so the
# table stays the full search's plus the flags (at the price of a few rows scored).
SKIP_MARGIN = 2e-3


@dataclass(frozen=True)
class SkippedRows:
    """What the search skips: ``parts`` (runs, N) int64 part of each row in each run (the
    labels: one run); a row is skipped for an anchor that shares its part in at least
    ``votes`` runs, or whose cosine to the anchor in ``coords`` (the cluster rule's
    diffusion coordinates; None: not used) is at least ``threshold``; ``what``: ``label``
    or ``cluster`` (the rule that drops them)."""

    parts: np.ndarray
    votes: int
    what: str
    coords: Any = None  # an array or CodedRows (pairkit.mine.spectral.all_coordinates)
    threshold: float = 1.0


def skippable_rows(ctx: FnContext, fn_config: FalseNegativeConfig,
                   config: MineConfig) -> SkippedRows | None:
    """The rows an anchor's search may skip on this store, or None (search everything)."""
    if not (config.hard and config.fn_mode == "eliminate" and not config.keep_flagged):
        return None
    if fn_config.trust_labels and "label" in fn_config.rules and ctx.labels is not None:
        from pairkit.mine.fn_context import label_codes

        codes = label_codes(ctx)
        if codes is not None and (codes >= 0).all() and len(np.unique(codes)) > 1:
            return SkippedRows(np.asarray(codes, dtype=np.int64)[None, :], 1, "label")
        if codes is not None and (codes >= 0).any():
            return None
    if "cluster" not in fn_config.rules:
        return None
    assign = ctx.cluster_assign
    if assign is None or len(assign) == 0 or len(np.unique(assign[0])) < 2:
        return None
    from pairkit.mine.rules.cluster import diffusion_threshold, votes_needed

    votes = votes_needed(ctx, fn_config)
    threshold = diffusion_threshold(ctx, fn_config)
    if threshold is None or ctx.diffusion is None:
        return SkippedRows(assign, votes, "cluster") if votes else None
    # votes 0: the threshold flags alone, and no row shares a cluster in more runs than
    # there are
    return SkippedRows(assign, votes or len(assign) + 1, "cluster", ctx.diffusion,
                       threshold + SKIP_MARGIN)
