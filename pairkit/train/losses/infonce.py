"""InfoNCE / NT-Xent with in-batch and mined hard negatives.

For anchor i with positives P(i) and negatives N(i) (scores are cosines, t the
temperature)::

    loss_i = -1/|P(i)| sum_{p in P(i)} log( exp(s_ip/t) / sum_{c in P(i) u N(i)} exp(s_ic/t) )

With one positive this is InfoNCE (van den Oord et al. 2018) / NT-Xent
(Chen et al. 2020, SimCLR, ``symmetric``); the mined hard negatives of the
anchor are appended to its denominator. Several positives arise when flagged
false negatives are attracted (Huynh et al. 2022, false-negative cancellation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pairkit.train.losses.candidates import build_candidates

if TYPE_CHECKING:
    import torch


def compute_loss_from_scores(scores: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor,
                             temperature: float) -> torch.Tensor:
    """Mean InfoNCE over rows with at least one positive; ``scores``/masks (R, C). Scalar."""
    import torch

    logits = scores.float() / temperature
    keep = pos | neg
    masked = torch.where(keep, logits, torch.full_like(logits, float("-inf")))
    log_den = torch.logsumexp(masked, dim=1, keepdim=True)
    log_prob = torch.where(pos, logits - log_den, torch.zeros_like(logits))
    n_pos = pos.sum(dim=1)
    rows = n_pos > 0
    per_row = -log_prob.sum(dim=1)[rows] / n_pos[rows]
    return per_row.mean()


def compute_loss_from_embeddings(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor | None = None,
    neg_valid: torch.Tensor | None = None,
    neg_attract: torch.Tensor | None = None,
    groups: torch.Tensor | None = None,
    *,
    temperature: float = 0.1,
    symmetric: bool = False,
) -> torch.Tensor:
    """InfoNCE of B pairs (normalised (B, d)) with optional mined negatives (B, K, d). Scalar."""
    scores, pos, neg = build_candidates(anchors, positives, negatives, neg_valid, neg_attract,
                                        groups, symmetric=symmetric)
    return compute_loss_from_scores(scores, pos, neg, temperature)
