"""Hard-negative reweighting with debiasing (Robinson et al. 2021, ICLR).

Negatives are weighted by ``exp(beta * s / t)`` (importance sampling towards
hard negatives) inside the debiased estimator of Chuang et al. 2020; the
formula is in :mod:`pairkit.train.losses.debiased`. ``beta = 0`` gives the
debiased loss back, ``tau_plus = 0`` turns debiasing off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pairkit.train.losses import debiased

if TYPE_CHECKING:
    import torch


def compute_loss_from_scores(scores: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor,
                             temperature: float, tau_plus: float, beta: float) -> torch.Tensor:
    """Mean hard-negative loss over (R, C) scores and masks. Scalar."""
    return debiased.compute_loss_from_scores(scores, pos, neg, temperature, tau_plus, beta)


def compute_loss_from_embeddings(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor | None = None,
    neg_valid: torch.Tensor | None = None,
    neg_attract: torch.Tensor | None = None,
    groups: torch.Tensor | None = None,
    *,
    temperature: float = 0.1,
    tau_plus: float = 0.1,
    beta: float = 1.0,
    symmetric: bool = False,
) -> torch.Tensor:
    """Hard-negative loss of B pairs (B, d) with optional mined negatives (B, K, d). Scalar."""
    return debiased.compute_loss_from_embeddings(
        anchors, positives, negatives, neg_valid, neg_attract, groups,
        temperature=temperature, tau_plus=tau_plus, beta=beta, symmetric=symmetric,
    )
