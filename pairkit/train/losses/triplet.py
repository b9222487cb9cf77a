"""Triplet margin loss on cosine distance d = 1 - cos (Schroff et al. 2015, FaceNet).

    loss(a, p, n) = max(0, d(a, p) - d(a, n) + margin) = max(0, s_an - s_ap + margin)

``hardest=False`` averages over every (anchor, positive, negative) triple of the
masks (the mined triplets); ``hardest=True`` uses only each anchor's most similar
negative (batch-hard, Hermans et al. 2017), used with in-batch negatives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pairkit.train.losses.candidates import build_candidates, packed

if TYPE_CHECKING:
    import torch


def compute_loss_from_scores(scores: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor,
                             margin: float, hardest: bool = False) -> torch.Tensor:
    """Mean triplet loss over the valid triples of (R, C) scores and masks. Scalar."""
    import torch

    scores = scores.float()
    pos_s, pos_m = packed(scores, pos)
    if hardest:
        hard = torch.where(neg, scores, torch.full_like(scores, float("-inf"))).max(dim=1).values
        valid = pos_m & torch.isfinite(hard)[:, None]
        terms = torch.relu(hard[:, None] - pos_s + margin)
    else:
        neg_s, neg_m = packed(scores, neg)
        valid = pos_m[:, :, None] & neg_m[:, None, :]
        terms = torch.relu(neg_s[:, None, :] - pos_s[:, :, None] + margin)
    if not bool(valid.any()):
        return scores.sum() * 0.0
    return terms[valid].mean()


def compute_loss_from_embeddings(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor | None = None,
    neg_valid: torch.Tensor | None = None,
    neg_attract: torch.Tensor | None = None,
    groups: torch.Tensor | None = None,
    *,
    margin: float = 0.2,
) -> torch.Tensor:
    """Triplet loss: over the mined negatives (B, K, d) when given, else batch-hard. Scalar."""
    mined = negatives is not None and negatives.shape[1] > 0
    scores, pos, neg = build_candidates(anchors, positives, negatives, neg_valid, neg_attract,
                                        groups, in_batch=not mined)
    return compute_loss_from_scores(scores, pos, neg, margin, hardest=not mined)
