"""Debiased contrastive loss (Chuang et al. 2020, NeurIPS) and its hard-negative
reweighting (Robinson et al. 2021, ICLR, "Contrastive learning with hard negative samples").

For anchor i, positive p, its N negatives n, t the temperature, tau+ the class prior::

    pos  = exp(s_ip / t),  w_n = exp(beta * s_in / t)      (beta = 0: w_n = 1, debiased)
    negs = N * sum_n w_n exp(s_in / t) / sum_n w_n
    Ng   = max( (negs - N * tau+ * pos) / (1 - tau+),  N * exp(-1/t) )
    loss = -log( pos / (pos + Ng) )

averaged over (anchor, positive) pairs. ``beta = 0`` is the debiased loss,
``tau+ = 0`` turns debiasing off. Computed in float64 after a per-row shift,
so low temperatures don't overflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pairkit.train.losses.candidates import build_candidates, packed

if TYPE_CHECKING:
    import torch


def compute_loss_from_scores(scores: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor,
                             temperature: float, tau_plus: float,
                             beta: float = 0.0) -> torch.Tensor:
    """Mean debiased (beta=0) or hard (beta>0) loss over (R, C) scores and masks. Scalar."""
    import torch

    logits = scores.double() / temperature
    shift = torch.where(pos | neg, logits, torch.full_like(logits, float("-inf")))
    shift = shift.max(dim=1, keepdim=True).values
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift)).detach()
    z = logits - shift
    pos_l, pos_m = packed(z, pos)                     # (R, P)
    neg_l, neg_m = packed(z, neg)                     # (R, M)
    n = neg_m.sum(dim=1, keepdim=True).double()       # (R, 1)
    neg_e = torch.where(neg_m, neg_l.exp(), torch.zeros_like(neg_l))
    if beta:
        w_l = torch.where(neg_m, beta * neg_l, torch.full_like(neg_l, float("-inf")))
        w = (w_l - w_l.max(dim=1, keepdim=True).values.clamp(min=-1e300)).exp()
        negs = n * (w * neg_e).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp(
            min=1e-300)
    else:
        negs = neg_e.sum(dim=1, keepdim=True)
    pos_e = pos_l.exp()                               # (R, P)
    floor = n * torch.exp(-1.0 / temperature - shift)
    ng = torch.maximum((negs - n * tau_plus * pos_e) / (1.0 - tau_plus), floor)
    valid = pos_m & (n > 0)
    if not bool(valid.any()):
        return scores.sum() * 0.0
    terms = -(pos_l - torch.log(pos_e + ng))
    return terms[valid].mean().float()


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
    beta: float = 0.0,
    symmetric: bool = False,
) -> torch.Tensor:
    """Debiased (or, with ``beta`` > 0, hard) loss of B pairs (B, d) + negatives (B, K, d)."""
    scores, pos, neg = build_candidates(anchors, positives, negatives, neg_valid, neg_attract,
                                        groups, symmetric=symmetric)
    return compute_loss_from_scores(scores, pos, neg, temperature, tau_plus, beta)

