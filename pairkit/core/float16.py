"""float16 rows to float32, fast: :func:`to_float32`.

A float16 store's rows are read as float32 wherever they are multiplied (the IVF lists
of :class:`pairkit.index.half_ivf.HalfIvf`, the rows a
:class:`pairkit.core.row_view.RowView` gathers). numpy converts float16 without the
CPU's conversion instructions: about 2 ns a value on the 2-core development machine,
where torch's CPU copy into a float32 tensor takes 0.1-0.3 ns (docs/benchmarks.md). In
a label-free ``mine`` of 200,000 x 1,280 float16 rows the conversions took 29 s of 143
(cProfile). float16 to float32 is exact, so both give the same values, bit for bit but
for the payload of a NaN (tests/core/test_float16.py).

torch takes ~1.7 s to import, so it is imported only once this process has converted
:data:`IMPORT_AFTER` values the slow way (about a second of numpy's conversions), or used
at once when something else imported it; blocks below :data:`SMALL` values stay with
numpy (the call's overhead). Its import also costs ~0.5 GB of RSS (0.29 GB of it
anonymous): a process whose memory is a large store's rows (:func:`avoid_torch`, called
by :func:`pairkit.index.half_ivf.build_half_ivf` for lists of :data:`LEAN_BYTES` and more)
never imports it for this: the out-of-core ``mine`` of 8M x 128 float16 rows peaked at
3.16 GB with it, 2.70 GB without (docs/benchmarks.md).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

SMALL = 1 << 14  # values: below this numpy's conversion is as fast as a torch call
IMPORT_AFTER = 1 << 29  # values converted by numpy before torch is imported for it

LEAN_BYTES = 1 << 30  # rows a process holds from which on it converts without torch

# values converted by numpy so far; torch once taken; lean: never import torch for this
state: dict[str, Any] = {"converted": 0, "torch": None, "lean": False}


def avoid_torch() -> None:
    """From now on this process converts without importing torch (it still uses torch
    when something else has loaded it): for a process whose memory is the rows it holds,
    where torch's ~0.5 GB would be a large share (module docstring)."""
    state["lean"] = True


def to_float32(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous float32 array (``x`` itself when it is one already); a
    float16 ``x`` converted exactly, through torch's copy when it is worth it."""
    if x.dtype != np.float16 or x.size < SMALL:
        return np.ascontiguousarray(x, dtype=np.float32)
    torch = _torch(x.size)
    if torch is None:
        return np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.float32)
    with warnings.catch_warnings():  # a read-only source (a mapped shard) is only read
        warnings.simplefilter("ignore", UserWarning)
        torch.from_numpy(out).copy_(torch.from_numpy(np.ascontiguousarray(x)))
    return out


def _torch(values: int) -> Any:
    """torch when it is loaded or now worth loading (see the module docstring), else
    None (counting ``values`` as converted by numpy)."""
    if state["torch"] is not None:
        return state["torch"]
    if "torch" not in sys.modules:
        state["converted"] += values
        if state["converted"] < IMPORT_AFTER or state.get("lean"):
            return None
    try:
        from pairkit.core.threads import import_torch

        torch = import_torch()  # with the run's thread budget
    except ImportError:  # pragma: no cover - torch is a dependency
        state["converted"] = -(1 << 62)  # never try again
        return None
    state["torch"] = torch
    return torch
