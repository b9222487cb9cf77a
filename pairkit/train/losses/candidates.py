"""Candidate scores for one batch: who is a positive and who is a negative of each anchor.

Every pairwise loss here (infonce, triplet, debiased, hard) is a function of
three (R, C) tensors: cosine ``scores`` of row anchors against candidates, and
boolean ``pos`` / ``neg`` masks. A candidate that is in neither mask (the
anchor itself, an in-batch item of the group of the row's anchor or of its positive,
an eliminated false negative, a padding slot) takes no part in the loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch


class PairGroups(NamedTuple):
    """A batch's groups with what else is known: ``pairs`` (B, 2) the groups of each
    pair's anchor and positive; ``table`` (U, U) bool over the batch's U distinct groups,
    which are known to be the same thing, and ``index`` (2B,) the row of that table of
    every view (anchors, then positives), or (2B + B K,) with the pairs' mined negatives
    after them (for supcon): :func:`pairkit.train.exclusions.batch_table`.
    A view known to be the same thing as a row's pair is no negative of that row."""

    pairs: torch.Tensor
    table: torch.Tensor
    index: torch.Tensor

    def excluded(self, symmetric: bool) -> torch.Tensor:
        """(R, C) bool over the in-batch block: (2B, 2B) symmetric, else (B, B) anchors
        against positives."""
        b = self.pairs.shape[0]
        ia, ip = self.index[:b], self.index[b:2 * b]
        if symmetric:
            cols = self.index[:2 * b]
            rows_a, rows_p = ia.repeat(2), ip.repeat(2)
        else:
            cols, rows_a, rows_p = ip, ia, ip
        return self.table[rows_a][:, cols] | self.table[rows_p][:, cols]

    def features_excluded(self, k: int) -> torch.Tensor:
        """(M, M) bool over supcon's M = 2B + B K features (anchors, positives, then each
        pair's K mined negatives): column c is known to be the same thing as row r's pair
        (the groups of its anchor and positive; a mined negative's own group), as
        :meth:`excluded` reads InfoNCE's rows, and belongs to another pair (a pair's own
        mined negatives stay its negatives, as in InfoNCE). Needs ``index`` with the
        negatives (:func:`pairkit.train.exclusions.batch_table` given their groups)."""
        import torch

        b = self.pairs.shape[0]
        if self.index.shape[0] != (2 + k) * b:
            raise ValueError(f"the batch table indexes {self.index.shape[0]} views, not the "
                             f"{(2 + k) * b} features of {b} pairs with {k} negatives each")
        ia, ip, ineg = self.index[:b], self.index[b:2 * b], self.index[2 * b:]
        rows_a, rows_p = torch.cat([ia, ia, ineg]), torch.cat([ip, ip, ineg])
        known = self.table[rows_a][:, self.index] | self.table[rows_p][:, self.index]
        pair = torch.arange(b, device=self.index.device)
        pair = torch.cat([pair, pair, pair.repeat_interleave(k)])
        return known & (pair[:, None] != pair[None, :])


def build_candidates(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor | None = None,
    neg_valid: torch.Tensor | None = None,
    neg_attract: torch.Tensor | None = None,
    groups: torch.Tensor | None = None,
    *,
    symmetric: bool = False,
    in_batch: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores and masks for a batch of B pairs with K mined negatives each.

    ``anchors``, ``positives``: (B, d) L2-normalised; ``negatives``: (B, K, d);
    ``neg_valid``: (B, K) bool (False = padding or eliminated false negative);
    ``neg_attract``: (B, K) bool (flagged false negatives treated as positives);
    ``groups``: (B,) int, or (B, 2): the group of each pair's anchor and of its positive
    (they differ for a mined positive); an in-batch candidate of either group of the
    row's pair is not a negative (default: every pair is its own group; (B,): both the
    same, as for views); or a :class:`PairGroups`, whose ``excluded`` candidates are no
    negatives either.

    Not symmetric: rows are the B anchors, candidates are the B positives of the
    batch, then the anchor's own K negatives -> (B, B + K).
    Symmetric (SimCLR's NT-Xent): rows are all 2B views (anchors, then
    positives), candidates are the 2B views without the row itself, then the
    pair's K negatives -> (2B, 2B + K).
    ``in_batch=False`` keeps only the pair's own positive as in-batch candidate.

    Returns ``(scores, pos, neg)``, each (R, C): float cosine scores, bool masks.
    """
    import torch

    b = anchors.shape[0]
    device = anchors.device
    known = None
    if isinstance(groups, PairGroups):
        groups, known = groups.pairs, groups
    if groups is None:
        groups = torch.arange(b, device=device)
    ga, gp = (groups[:, 0], groups[:, 1]) if groups.ndim == 2 else (groups, groups)
    if symmetric:
        views = torch.cat([anchors, positives], dim=0)
        g = torch.cat([ga, gp])  # each view's group
        row_a, row_p = torch.cat([ga, ga]), torch.cat([gp, gp])  # each row's pair's groups
        batch_scores = views @ views.T
        rows = torch.arange(2 * b, device=device)
        partner = (rows + b) % (2 * b)
        batch_pos = torch.zeros(2 * b, 2 * b, dtype=torch.bool, device=device)
        batch_pos[rows, partner] = True
        batch_neg = (g[None, :] != row_a[:, None]) & (g[None, :] != row_p[:, None])
        row_vecs = views
    else:
        batch_scores = anchors @ positives.T
        batch_pos = torch.eye(b, dtype=torch.bool, device=device)
        batch_neg = (gp[None, :] != ga[:, None]) & (gp[None, :] != gp[:, None])
        row_vecs = anchors
    if known is not None:
        batch_neg = batch_neg & ~known.excluded(symmetric)
    if not in_batch:
        batch_neg = torch.zeros_like(batch_neg)
    if negatives is None or negatives.shape[1] == 0:
        return batch_scores, batch_pos, batch_neg
    k = negatives.shape[1]
    if neg_valid is None:
        neg_valid = torch.ones(b, k, dtype=torch.bool, device=device)
    if neg_attract is None:
        neg_attract = torch.zeros(b, k, dtype=torch.bool, device=device)
    if symmetric:
        negatives = torch.cat([negatives, negatives], dim=0)
        neg_valid = torch.cat([neg_valid, neg_valid], dim=0)
        neg_attract = torch.cat([neg_attract, neg_attract], dim=0)
    hard_scores = torch.einsum("rd,rkd->rk", row_vecs, negatives)
    hard_pos = neg_valid & neg_attract
    hard_neg = neg_valid & ~neg_attract
    return (
        torch.cat([batch_scores, hard_scores], dim=1),
        torch.cat([batch_pos, hard_pos], dim=1),
        torch.cat([batch_neg, hard_neg], dim=1),
    )


def packed(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pack the masked entries of each row: returns (R, M) values and (R, M) mask.

    M is the largest number of True entries in a row (at least 1).
    """
    import torch

    counts = mask.sum(dim=1)
    width = max(int(counts.max().item()) if mask.numel() else 0, 1)
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :width]
    out = torch.gather(values, 1, order)
    out_mask = torch.arange(width, device=values.device)[None, :] < counts[:, None]
    return out, out_mask
