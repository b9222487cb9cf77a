"""Counter-based randomness: uniform floats as a pure function of ``(seed, a, b)``.

Every random choice of mining (positive draws, random/softmax sampling, easy
candidates) hashes the anchor and the item instead of drawing from a stream, so the
output depends only on the seed, not on batch sizes, retries, threads or workers.
"""

from __future__ import annotations

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_G = np.uint64(0x9E3779B97F4A7C15)


def hash_uniform(seed: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Uniform floats in (0, 1), a deterministic function of ``(seed, a, b)``
    (splitmix64 of the mixed integers). Shape: broadcast of ``a`` and ``b``."""
    with np.errstate(over="ignore"):
        x = (np.asarray(a, dtype=np.int64).astype(np.uint64) * _G
             + np.uint64(seed % 2**64) * _M2)  # the whole seed (below 2**32: as before)
        x = _splitmix(x) ^ np.asarray(b, dtype=np.int64).astype(np.uint64)
        x = _splitmix(x + _G)
    return ((x >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x + _G
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))
