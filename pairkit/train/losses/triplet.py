"""Triplet margin loss on cosine distance d = 1 - cos (Schroff et al. 2015, FaceNet).

    loss(a, p, n) = max(0, d(a, p) - d(a, n) + margin) = max(0, s_an - s_ap + margin)

``hardest=False`` averages over every (anchor, positive, negative) triple of the
masks (the mined triplets); ``hardest=True`` uses only each anchor's most similar
negative (batch-hard, Hermans et al. 2017), used with in-batch negatives: for every row of
a batch without mined negatives, and for the rows of a mined batch whose negatives were
all eliminated or masked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pairkit.train.losses.candidates import build_candidates, packed

if TYPE_CHECKING:
    import torch


def triplet_terms(scores: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, margin: float,
                  hardest: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The triplet terms of (R, C) scores and masks and which of them are valid triples:
    every (positive, negative) of a row, or with ``hardest`` each positive against the
    row's most similar negative."""
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
    return terms, valid


def compute_loss_from_scores(scores: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor,
                             margin: float, hardest: bool = False) -> torch.Tensor:
    """Mean triplet loss over the valid triples of (R, C) scores and masks. Scalar."""
    terms, valid = triplet_terms(scores, pos, neg, margin, hardest)
    if not bool(valid.any()):
        return scores.float().sum() * 0.0
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
    """Triplet loss, mean over the batch's triples: a row with mined negatives (B, K, d)
    has one per (positive, mined negative); a row without (none mined, or all of them
    eliminated or masked) falls back to batch-hard over the in-batch candidates. Scalar."""
    import torch

    scores, pos, neg = build_candidates(anchors, positives, negatives, neg_valid, neg_attract,
                                        groups)
    if negatives is None or negatives.shape[1] == 0:
        return compute_loss_from_scores(scores, pos, neg, margin, hardest=True)
    b = anchors.shape[0]
    column = torch.arange(scores.shape[1], device=scores.device)[None, :]
    has_mined = neg[:, b:].any(dim=1, keepdim=True)
    mined_terms, mined_valid = triplet_terms(scores, pos, neg & (column >= b) & has_mined,
                                             margin)
    batch_terms, batch_valid = triplet_terms(scores, pos, neg & (column < b) & ~has_mined,
                                             margin, hardest=True)
    terms = torch.cat([mined_terms[mined_valid], batch_terms[batch_valid]])
    return terms.mean() if len(terms) else scores.float().sum() * 0.0
