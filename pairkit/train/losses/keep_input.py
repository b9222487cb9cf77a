"""Keeping what the input had: the head's neighbour distribution over the batch matched to
the input features' (relational distillation from the frozen input).

For anchor i of a batch of B anchors, with input rows x (the store's embeddings, the
teacher) and head outputs z (the student), both L2-normalised, over the other anchors
j != i::

    p_ij = softmax_j(x_i . x_j / t_in)        q_ij = softmax_j(z_i . z_j / t)
    loss = 1/B sum_i sum_{j != i} -p_ij log q_ij

the cross-entropy of the student's similarity distribution against the teacher's, as
CompRess (Abbasi Koohpayegani, Tejankar & Pirsiavash, NeurIPS 2020) and SEED (Fang et
al., ICLR 2021) distil a teacher's neighbour distribution over a memory bank, with the
frozen input as the teacher. It is added to the contrastive loss with a weight
(``train --keep-input``): the contrastive loss pulls the mined positives in and pushes the
negatives out, and this term keeps the rest of each row's neighbourhood ordered as the
input ordered it, which instance discrimination alone flattens (the far end of a class's
ranking, the directions a linear probe reads). With ``t_in`` below ``t`` (0.05 against
0.1) the head's similarities follow the input's with twice their spread. Measurements:
docs/benchmarks.md ("keeping the input's neighbourhoods").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def compute_loss_from_embeddings(inputs: torch.Tensor, outputs: torch.Tensor, *,
                                 input_temperature: float = 0.05,
                                 temperature: float = 0.1) -> torch.Tensor:
    """The term above for ``inputs`` (B, d_in) and ``outputs`` (B, d), both L2-normalised
    rows of the same B anchors. Scalar; 0 for a batch of fewer than two rows."""
    import torch

    b = inputs.shape[0]
    if b < 2:
        return outputs.sum() * 0.0
    off = ~torch.eye(b, dtype=torch.bool, device=outputs.device)
    teacher = (inputs.float() @ inputs.float().T)[off].reshape(b, b - 1)
    student = (outputs.float() @ outputs.float().T)[off].reshape(b, b - 1)
    p = torch.softmax(teacher / input_temperature, dim=1).detach()
    log_q = torch.log_softmax(student / temperature, dim=1)
    return -(p * log_q).sum(dim=1).mean()
