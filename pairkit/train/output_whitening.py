"""The head's output whitening: a partial PCA whitening of the trained head's outputs,
fitted on the training rows after the last epoch and applied by :meth:`Head.apply`.

Why: the outputs of a contrastive head, like the raw embeddings, are anisotropic: a few
leading directions carry most of the variance, so cosine neighbourhoods are dominated by
them and by hubs. Rotating onto the principal components and scaling each by
``eigenvalue ** -power`` (Jegou & Chum, ECCV 2012: whitening for retrieval; ``power``
1/4 is a partial whitening, 1/2 the full one), with the last ``1 - VARIANCE`` of the
variance dropped, flattens that spectrum. It is label-free and costs one eigen solve
of a d x d covariance at the end of training (a head whose training did not finish has
none). Measured on the real sets of docs/benchmarks.md ("Downstream"): held-out kNN
top-1 of the same heads -0.003 to +0.054 with it (the default loop +0.013 to +0.068 over
the raw features); the linear probe -0.018 to +0.012 against the raw features', and
MAP@R / R-precision 0.03-0.07 lower: a trade-off, so ``train`` leaves it off unless
``--whiten`` asks for it.

Stored as ``whitening.safetensors`` in the head folder: ``mean`` (d,) and ``projection``
(d, D) = the components times their scales; ``config.json`` says ``whitening``
(``power``, ``variance``, ``dims``, ``rows``) and the head's format version is 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pairkit.core.atomic import atomic_path
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import torch

FILE = "whitening.safetensors"
VARIANCE = 0.999  # of the outputs' variance kept (the rest: mostly noise, dropped)
FIT_ROWS = 20_000  # training rows the whitening is fitted on (seeded sample)
DEFAULT_POWER = 0.25  # the measured choice when it is turned on (train's default is 0: off)
Whitening = tuple[np.ndarray, np.ndarray]  # (mean (d,), projection (d, D))


def fit_rows(train_rows: np.ndarray, seed: int) -> np.ndarray:
    """The training rows the whitening is fitted on: all, or a seeded sample of
    :data:`FIT_ROWS` of them (sorted)."""
    if len(train_rows) <= FIT_ROWS:
        return np.asarray(train_rows)
    rng = np.random.default_rng([seed, 47])
    return np.sort(rng.choice(train_rows, FIT_ROWS, replace=False))


def fit_output_whitening(outputs: np.ndarray, power: float) -> Whitening:
    """``(mean (d,), projection (d, D))`` of the partial whitening of ``outputs`` (n, d),
    the head's L2-normalised outputs on the fitting rows: the fewest leading principal
    components holding :data:`VARIANCE` of the variance, scaled by ``eigenvalue **
    -power`` relative to the first (:func:`pairkit.mine.whitening.fit_whitening`)."""
    from pairkit.mine.whitening import fit_whitening

    w = fit_whitening(outputs, power=power, variance=VARIANCE, max_dims=outputs.shape[1],
                      sample=len(outputs))
    projection = np.ascontiguousarray(w.components * w.scale, dtype=np.float32)
    return w.mean.astype(np.float32), projection


def save_output_whitening(folder: Path, mean: np.ndarray, projection: np.ndarray) -> None:
    """Write ``whitening.safetensors`` atomically."""
    from safetensors.numpy import save_file

    with atomic_path(folder / FILE) as tmp:
        save_file({"mean": np.ascontiguousarray(mean, dtype=np.float32),
                   "projection": np.ascontiguousarray(projection, dtype=np.float32)}, str(tmp))


def load_output_whitening(folder: Path, out_dim: int, dims: int) -> Whitening:
    """``(mean, projection)`` from ``folder``, checked against the module's ``out_dim``
    and the ``dims`` that config.json records, of full rank; PairkitError naming the
    problem."""
    from safetensors.numpy import load_file

    from pairkit.train.head import read_tensor_file

    tensors = read_tensor_file(folder, FILE, load_file)
    mean, projection = tensors.get("mean"), tensors.get("projection")
    if (mean is None or projection is None or mean.shape != (out_dim,)
            or projection.shape != (out_dim, dims)
            or not (np.isfinite(mean).all() and np.isfinite(projection).all())):
        raise PairkitError(f"head {folder}: {FILE} does not match config.json (expected "
                           f"mean ({out_dim},) and projection ({out_dim}, {dims}), finite)")
    rank = int(np.linalg.matrix_rank(projection.astype(np.float64)))
    if rank < dims:
        raise PairkitError(f"head {folder}: {FILE}'s projection has rank {rank} for its {dims} "
                           "dims (zero or dependent directions): it is damaged; retrain the "
                           "head")
    return mean.astype(np.float32), projection.astype(np.float32)


def whiten(z: torch.Tensor, mean: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """Rows ``z`` (L2-normalised head outputs) centred, projected and re-normalised."""
    import torch

    return torch.nn.functional.normalize((z - mean) @ projection, dim=1)
