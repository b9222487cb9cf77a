"""Splitting items into queries and references, and checking two stores match."""

from __future__ import annotations

from typing import Any

import numpy as np

from pairkit.core.encoder_match import encoder_difference, same_encoder
from pairkit.errors import PairkitError, UsageError


def check_fraction(fraction: float, option: str = "--test-fraction",
                   allow_zero: bool = False) -> None:
    """UsageError unless ``fraction`` is in (0, 1) (``allow_zero``: [0, 1)): the check of
    :func:`split_by_source`, made before a store is read."""
    if not ((allow_zero and fraction == 0) or 0.0 < fraction < 1.0):
        bounds = "in [0, 1)" if allow_zero else "> 0 and < 1"
        raise UsageError(f"{option} must be {bounds}, got {fraction}")


def split_by_source(source_codes: np.ndarray, fraction: float, seed: int, *,
                    option: str = "--test-fraction", allow_zero: bool = False) -> np.ndarray:
    """Bool mask (N,): True for rows whose source falls in the held-out part (eval's test
    part, train's validation part: one store and one seed split alike in both).

    ``round(fraction * n_sources)`` sources (at least 1, at most all but one) are drawn
    with ``seed``; all views of a source land on the same side. ``allow_zero``: a
    ``fraction`` of 0 holds nothing out. ``option`` names the fraction in messages.
    """
    codes = np.asarray(source_codes, dtype=np.int64)
    check_fraction(fraction, option, allow_zero)
    if allow_zero and fraction == 0:
        return np.zeros(len(codes), dtype=bool)
    uniq = np.unique(codes)
    if len(uniq) < 2:
        raise PairkitError(
            f"a split by source needs at least 2 sources, the store has {len(uniq)}"
        )
    n_test = int(min(max(round(fraction * len(uniq)), 1), len(uniq) - 1))
    rng = np.random.default_rng(seed)
    test_sources = rng.choice(uniq, size=n_test, replace=False)
    return np.isin(codes, test_sources)


def check_compatible(ref_dim: int, ref_encoder: dict[str, Any], test_dim: int,
                     test_encoder: dict[str, Any], ref_name: str, test_name: str) -> None:
    """Raise PairkitError unless the two stores have one dimension and one encoder."""
    if ref_dim != test_dim:
        raise PairkitError(
            f"--against store {test_name} has dim {test_dim}, store {ref_name} has dim "
            f"{ref_dim}: both must come from the same encoder"
        )
    if not same_encoder(ref_encoder, test_encoder):
        raise PairkitError(
            f"--against store {test_name} and store {ref_name} were made by different "
            f"encoders ({encoder_difference(ref_encoder, test_encoder)}): vectors of "
            "different encoders are not comparable"
        )
