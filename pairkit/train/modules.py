"""The torch modules of the head kinds (imported only where torch is already needed)."""

from __future__ import annotations

import torch


class ResidualMLP(torch.nn.Module):
    """``x + up(relu(down(x)))`` with ``up`` initialised to zero: the head starts as the
    identity, so an untrained (or barely trained) head gives the raw embeddings back, and
    training moves them only as far as the loss asks (what the raw features already hold,
    e.g. for a linear probe, is kept). Input and output dims are equal.
    """

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.down = torch.nn.Linear(dim, hidden)
        self.up = torch.nn.Linear(hidden, dim)
        torch.nn.init.zeros_(self.up.weight)
        torch.nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(torch.relu(self.down(x)))
