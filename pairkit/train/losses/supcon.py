"""Supervised contrastive loss, the L_out form (Khosla et al. 2020, NeurIPS).

Over M normalised features z with labels y, A(i) = all valid features but i,
P(i) = members of A(i) with label y_i::

    L = mean over i with |P(i)| > 0 of
        -1/|P(i)| sum_{p in P(i)} log( exp(z_i.z_p/t) / sum_{a in A(i)} exp(z_i.z_a/t) )
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def compute_loss_from_embeddings(features: torch.Tensor, labels: torch.Tensor,
                                 valid: torch.Tensor | None = None, *,
                                 temperature: float = 0.1) -> torch.Tensor:
    """SupCon L_out of ``features`` (M, d) normalised, ``labels`` (M,) int. Scalar.

    ``valid`` (M,) bool drops features (padding, eliminated false negatives)
    from anchors and denominators alike.
    """
    import torch

    m = features.shape[0]
    if valid is None:
        valid = torch.ones(m, dtype=torch.bool, device=features.device)
    logits = (features.float() @ features.float().T) / temperature
    eye = torch.eye(m, dtype=torch.bool, device=features.device)
    others = valid[:, None] & valid[None, :] & ~eye
    same = (labels[:, None] == labels[None, :]) & others
    masked = torch.where(others, logits, torch.full_like(logits, float("-inf")))
    log_den = torch.logsumexp(masked, dim=1, keepdim=True)
    log_prob = torch.where(same, logits - log_den, torch.zeros_like(logits))
    n_pos = same.sum(dim=1)
    rows = n_pos > 0
    if not bool(rows.any()):
        return features.sum() * 0.0
    return (-log_prob.sum(dim=1)[rows] / n_pos[rows]).mean()
