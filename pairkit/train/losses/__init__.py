"""Contrastive losses, one module each, and the batch dispatcher the training loop uses.

Every module exposes a pure ``compute_loss_from_embeddings`` (tests check it on
hand-written tensors); :func:`batch_loss` only routes a batch of projected
embeddings to the chosen loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pairkit.errors import UsageError
from pairkit.train.losses.candidates import PairGroups

if TYPE_CHECKING:
    import torch

LOSSES = ("infonce", "triplet", "supcon", "debiased", "hard")
SYMMETRIC_LOSSES = ("infonce", "debiased", "hard")  # the losses --symmetric changes


@dataclass(frozen=True)
class LossConfig:
    """Which loss and its parameters (each is used only by the losses that read it)."""

    name: str = "infonce"
    temperature: float = 0.1
    symmetric: bool = False
    margin: float = 0.2
    tau_plus: float = 0.1
    beta: float = 1.0
    keep_input: float = 0.5  # weight of the input's neighbourhoods (keep_input.py); 0: off
    keep_input_temperature: float = 0.05

    def check(self) -> None:
        """Raise :class:`UsageError` naming the first bad value."""
        if self.name not in LOSSES:
            raise UsageError(f"--loss must be one of {', '.join(LOSSES)}, got {self.name}")
        if self.symmetric and self.name not in SYMMETRIC_LOSSES:
            raise UsageError(f"--symmetric applies to --loss {', '.join(SYMMETRIC_LOSSES[:-1])} "
                             f"or {SYMMETRIC_LOSSES[-1]}, not {self.name}")
        if not self.temperature > 0:
            raise UsageError(f"--temperature must be > 0, got {self.temperature}")
        if not self.margin >= 0:
            raise UsageError(f"--margin must be >= 0, got {self.margin}")
        if not 0 <= self.tau_plus < 1:
            raise UsageError(f"--tau-plus must be in [0, 1), got {self.tau_plus}")
        if not self.beta >= 0:
            raise UsageError(f"--beta must be >= 0, got {self.beta}")
        if not self.keep_input >= 0:
            raise UsageError(f"--keep-input must be >= 0 (0: off), got {self.keep_input}")
        if not self.keep_input_temperature > 0:
            raise UsageError(f"--keep-input-temperature must be > 0, got "
                             f"{self.keep_input_temperature}")
        self._check_read()

    def _check_read(self) -> None:
        """UsageError for a value set away from its default that this loss never reads
        (it would be recorded in the head folder as if it had shaped the head)."""
        default = LossConfig(name=self.name)
        unread = [("margin", "--margin", "triplet", ("triplet",)),
                  ("tau_plus", "--tau-plus", "debiased or hard", ("debiased", "hard")),
                  ("beta", "--beta", "hard", ("hard",))]
        for attr, flag, which, readers in unread:
            if getattr(self, attr) != getattr(default, attr) and self.name not in readers:
                raise UsageError(f"{flag} applies to --loss {which}, not {self.name}")
        if (self.temperature != default.temperature and self.name == "triplet"
                and not self.keep_input):
            raise UsageError("--temperature applies to every loss but triplet and to "
                             "--keep-input, and this run has neither")
        if self.keep_input_temperature != default.keep_input_temperature and not self.keep_input:
            raise UsageError("--keep-input-temperature applies to --keep-input, which is 0 "
                             "(off)")


def batch_loss(
    cfg: LossConfig,
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    neg_valid: torch.Tensor,
    neg_attract: torch.Tensor,
    groups: torch.Tensor,
    neg_groups: torch.Tensor,
    inputs: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss of one batch: anchors/positives (B, d), negatives (B, K, d), masks (B, K).

    ``groups`` (B,) or (B, 2): relation group of each anchor (and of its positive: an
    in-batch candidate of either is no negative of the pair's rows); ``neg_groups`` (B,
    K): of each negative (used by supcon, where features of one group are positives). The chosen
    contrastive loss, plus, with ``cfg.keep_input`` > 0, that weight times the term that
    keeps the input's neighbourhoods (:mod:`pairkit.train.losses.keep_input`; ``inputs``:
    the anchors' input rows, (B, d_in) L2-normalised). ``rows`` (2B + B K,): the store row
    of each anchor, positive and negative (supcon: a row in the batch twice under two
    groups is one class, never a negative of itself). Supcon reads a :class:`PairGroups`'
    table over all its features (``forward(with_negatives=True)``): a feature known to be
    the same thing as another pair's is in neither's denominator.
    """
    import torch

    from pairkit.train.losses import debiased, hard, infonce, keep_input, supcon, triplet

    if cfg.name == "infonce":
        loss = infonce.compute_loss_from_embeddings(
            anchors, positives, negatives, neg_valid, neg_attract, groups,
            temperature=cfg.temperature, symmetric=cfg.symmetric)
    elif cfg.name == "triplet":
        loss = triplet.compute_loss_from_embeddings(
            anchors, positives, negatives, neg_valid, neg_attract, groups, margin=cfg.margin)
    elif cfg.name == "debiased":
        loss = debiased.compute_loss_from_embeddings(
            anchors, positives, negatives, neg_valid, neg_attract, groups,
            temperature=cfg.temperature, tau_plus=cfg.tau_plus, symmetric=cfg.symmetric)
    elif cfg.name == "hard":
        loss = hard.compute_loss_from_embeddings(
            anchors, positives, negatives, neg_valid, neg_attract, groups,
            temperature=cfg.temperature, tau_plus=cfg.tau_plus, beta=cfg.beta,
            symmetric=cfg.symmetric)
    else:
        # supcon: anchors and positives share the anchor's group; mined negatives keep
        # their own group unless attracted (then the anchor's); eliminated ones are dropped.
        b, k = neg_valid.shape
        known = None
        if isinstance(groups, PairGroups):  # features known to be the same thing: no negatives
            known, groups = groups.features_excluded(k), groups.pairs
        groups = groups[:, 0] if groups.ndim == 2 else groups  # a pair is its anchor's group
        features = torch.cat([anchors, positives, negatives.reshape(b * k, anchors.shape[1])],
                             dim=0)
        neg_labels = torch.where(neg_attract, groups[:, None].expand(b, k), neg_groups)
        labels = torch.cat([groups, groups, neg_labels.reshape(-1)])
        valid = torch.cat([torch.ones(2 * b, dtype=torch.bool, device=anchors.device),
                           neg_valid.reshape(-1)])
        loss = supcon.compute_loss_from_embeddings(features, labels, valid,
                                                   temperature=cfg.temperature, rows=rows,
                                                   excluded=known)
    if cfg.keep_input > 0 and inputs is not None:
        loss = loss + cfg.keep_input * keep_input.compute_loss_from_embeddings(
            inputs, anchors, input_temperature=cfg.keep_input_temperature,
            temperature=cfg.temperature)
    return loss
