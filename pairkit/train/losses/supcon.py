"""Supervised contrastive loss, the L_out form (Khosla et al. 2020, NeurIPS).

Over M normalised features z with labels y, A(i) = all valid features but i,
P(i) = members of A(i) with label y_i::

    L = mean over i with |P(i)| > 0 of
        -1/|P(i)| sum_{p in P(i)} log( exp(z_i.z_p/t) / sum_{a in A(i)} exp(z_i.z_a/t) )

A training batch can hold one store row twice under two labels (a mined positive is
its anchor's positive under the anchor's group and an anchor itself under its own; the
views of an unlabelled item under ``--relation label``). Given each feature's ``rows``,
labels joined by a shared row are one class (:func:`row_classes`): a row is never a
negative of its own copy, and copies are positives of each other, as SupCon's views of
one sample are.

Given ``excluded``, pairs of features known from the pair table to be the same thing
(mined positives, flagged false negatives: :mod:`pairkit.train.exclusions`) are left out
of each other's A(i) unless they share a class, as InfoNCE leaves them out of its
denominators (:meth:`pairkit.train.losses.candidates.PairGroups.features_excluded`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def row_classes(labels: torch.Tensor, rows: torch.Tensor,
                valid: torch.Tensor | None = None) -> torch.Tensor:
    """(M,) int class of each feature: the connected components of "same label" and
    "same row" over features with ``labels`` (M,) and store ``rows`` (M,); an invalid
    feature (``valid`` False) joins by its label only. Equal labels stay one class, so a
    batch where every row has one label keeps its classes."""
    import torch

    m = labels.shape[0]
    if valid is not None:
        rows = torch.where(valid, rows, -1 - torch.arange(m, device=rows.device))
    lab = torch.unique(labels, return_inverse=True)[1]
    row = torch.unique(rows, return_inverse=True)[1]
    comp = lab
    while True:  # the smallest class id spreads one hop each way per pass (few passes)
        joined = comp.new_full((m,), m).scatter_reduce(0, row, comp, "amin")[row]
        joined = comp.new_full((m,), m).scatter_reduce(0, lab, joined, "amin")[lab]
        if torch.equal(joined, comp):
            return comp
        comp = joined


def compute_loss_from_embeddings(features: torch.Tensor, labels: torch.Tensor,
                                 valid: torch.Tensor | None = None, *,
                                 temperature: float = 0.1,
                                 rows: torch.Tensor | None = None,
                                 excluded: torch.Tensor | None = None) -> torch.Tensor:
    """SupCon L_out of ``features`` (M, d) normalised, ``labels`` (M,) int. Scalar.

    ``valid`` (M,) bool drops features (padding, eliminated false negatives)
    from anchors and denominators alike. ``rows`` (M,) int, the store row of each
    feature: labels that share a row are joined into one class (:func:`row_classes`).
    ``excluded`` (M, M) bool: column j is known to be the same thing as row i; it is
    left out of A(i) unless it is in P(i).
    """
    import torch

    m = features.shape[0]
    if valid is None:
        valid = torch.ones(m, dtype=torch.bool, device=features.device)
    if rows is not None:
        labels = row_classes(labels, rows, valid)
    logits = (features.float() @ features.float().T) / temperature
    eye = torch.eye(m, dtype=torch.bool, device=features.device)
    others = valid[:, None] & valid[None, :] & ~eye
    same = (labels[:, None] == labels[None, :]) & others
    if excluded is not None:
        others = others & (same | ~excluded)
    masked = torch.where(others, logits, torch.full_like(logits, float("-inf")))
    log_den = torch.logsumexp(masked, dim=1, keepdim=True)
    log_prob = torch.where(same, logits - log_den, torch.zeros_like(logits))
    n_pos = same.sum(dim=1)
    sel = n_pos > 0
    if not bool(sel.any()):
        return features.sum() * 0.0
    return (-log_prob.sum(dim=1)[sel] / n_pos[sel]).mean()
