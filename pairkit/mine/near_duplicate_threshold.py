"""The threshold of the pixel check, from the calibration copies *and* the store itself.

The calibration (:class:`pairkit.mine.near_duplicate_check.PixelCheck`) knows the scores
``C`` of known copies (edited copies of a sample of the store's images against their
originals) and, after scoring every candidate pair, each image's best score against any
*other* image of the store, ``nearest``. The 1st percentile of ``C`` finds 99% of such
copies, but when the store's different images look alike at the resolution the check sees
(garments at 28 px, where a 2 px shift is 7% of the side) it also passes most of the store.

So the threshold is the lowest candidate ``t`` (quantiles of ``C`` from the 1st up to the
median) at which the images above ``t`` are explained by duplicates. Let ``s`` be the share
of the store's images with a duplicate; an image with one reaches ``t`` with the copies'
rate ``S_C(t) = mean(C >= t)``, so ``s * S_C(t) * n`` images are expected above ``t``.
``s`` is estimated where look-alikes are rarest, at the copies' median and 25th
percentile (the larger of the two, each count bounded above): ``s = mean(nearest >= q) /
S_C(q)``. At each ``t`` the images above it beyond
that expectation are false; ``t`` is accepted when they are at most ``max(slack, (1 -
precision) x images above)``. At the median the excess is 0 by construction, so the search
always ends; the expected recall of copies like the calibration's is ``S_C(t)``.

This is the same idea as a two-component mixture (copies vs. look-alikes) with the copy
component known from the calibration; it only moves the threshold *up* from the 1st
percentile, and only when the store shows more images above it than duplicates explain
and (given the pair scores) more pairs than those images make two by two: a store whose
few duplicates score a little below the calibration's copies keeps the 1st percentile.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

PRECISION = 0.95  # share of the images above the threshold that must be explained
SLACK = 2  # images above the expectation tolerated whatever the share (one false pair)
STEP = 0.01  # quantile step of the candidate thresholds
SHARE_LEVELS = (0.5, 0.25)  # copies' quantiles where the duplicate share is estimated


@dataclass(frozen=True)
class ThresholdChoice:
    """What :func:`choose_threshold` decided, for the summary's calibration record."""

    threshold: float  # the chosen aligned-correlation threshold
    copies_threshold: float  # the ``quantile`` of the copies' scores (the start)
    raised: bool  # threshold > copies_threshold
    expected_recall: float  # share of the calibration copies at or above ``threshold``
    duplicate_share: float  # estimated share of the store's images with a duplicate
    above_copies_threshold: float  # share of the store's images reaching the start
    above_threshold: float  # share of the store's images reaching the threshold

    def record(self) -> dict[str, float | bool]:
        """The fields, shares rounded to 5 decimals (the thresholds as they are)."""
        return {k: (round(v, 5) if k not in ("threshold", "copies_threshold")
                    and isinstance(v, float) else v) for k, v in asdict(self).items()}


def choose_threshold(copy_scores: np.ndarray, nearest: np.ndarray, quantile: float = 0.01,
                     precision: float = PRECISION, slack: int = SLACK,
                     pair_scores: np.ndarray | None = None) -> ThresholdChoice:
    """The threshold for ``copy_scores`` (known copies' scores) on a store whose images'
    best scores against another image are ``nearest`` (-1 or lower: none); module doc.
    ``pair_scores``: the scores of every pair checked; when given, the threshold is only
    raised if the pairs at the start are also more than the images there explain (about
    one pair per two images: duplicates come in pairs, look-alikes in families)."""
    c = np.sort(np.asarray(copy_scores, dtype=np.float64).ravel())
    near = np.asarray(nearest, dtype=np.float64).ravel()
    if not len(c):
        raise ValueError("choose_threshold needs at least one copy score")
    n = len(near)

    def copies_above(t: float) -> float:
        return float(len(c) - np.searchsorted(c, t, side="left")) / len(c)

    start = float(np.quantile(c, quantile))
    median = float(np.quantile(c, 0.5))
    share = 0.0
    for level in SHARE_LEVELS:
        # an upper bound on the count at the level (Poisson, about 90%): small stores and
        # few duplicates must not look like look-alikes by chance
        t = float(np.quantile(c, level))
        if n and copies_above(t) > 0:
            k = float(np.sum(near >= t))
            share = max(share, min(1.0, float(k + 1.3 * np.sqrt(k) + 1.0) / n
                                   / copies_above(t)))
    levels = np.arange(quantile, 0.5, STEP)
    candidates = [*np.quantile(c, levels).tolist(), median] if len(levels) else [median]
    chosen = median
    if pair_scores is not None:
        seen = int(np.sum(near >= start))
        pairs = int(np.sum(np.asarray(pair_scores) >= start))
        if pairs - seen / 2 <= max(slack, (1.0 - precision) * pairs):
            candidates = []  # two by two: duplicates, whatever the images' count says
            chosen = start
    for t in candidates:
        seen = int(np.sum(near >= t))
        explained = share * copies_above(t) * n
        if seen - explained <= max(slack, (1.0 - precision) * seen):
            chosen = float(t)
            break
    chosen = max(chosen, start)
    return ThresholdChoice(
        threshold=chosen, copies_threshold=start, raised=chosen > start,
        expected_recall=copies_above(chosen), duplicate_share=share,
        above_copies_threshold=float(np.mean(near >= start)) if n else 0.0,
        above_threshold=float(np.mean(near >= chosen)) if n else 0.0,
    )
