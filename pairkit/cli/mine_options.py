"""The false-negative options of ``pairkit mine`` that need more than one line to say
(the command's module stays a list of its options)."""

from __future__ import annotations

from typing import Any

import typer


def fn_near_dup_threshold_option() -> Any:
    """mine's ``--fn-near-dup-threshold`` (the near-duplicate rule's cosine)."""
    from pairkit.mine.thresholds import NEAR_DUPLICATE_THRESHOLD

    return typer.Option(None, "--fn-near-dup-threshold", help="near-duplicate rule: cosine.",
                        show_default=f"dedup's, {NEAR_DUPLICATE_THRESHOLD}")


def fn_cluster_votes_option() -> Any:
    """mine's ``--fn-cluster-votes`` (the cluster rule's runs that must agree)."""
    return typer.Option(
        None, "--fn-cluster-votes", help="cluster rule: runs that must put anchor and "
        "candidate together (raised while > 50% of random pairs would be).",
        show_default="all runs; 2 with --fn-cluster-diffusion 0")


def fn_cluster_diffusion_option() -> Any:
    """mine's ``--fn-cluster-diffusion`` (the cluster rule's diffusion-cosine threshold)."""
    return typer.Option(
        None, "--fn-cluster-diffusion", help="cluster rule: also flag a candidate whose cosine "
        "to the anchor in the spectral embedding's diffusion coordinates is at least this "
        "(0: off; raised while > 50% of random pairs would be flagged).", show_default="0.4")
