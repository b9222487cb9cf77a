"""float16 rows to float32: numpy's conversion against :func:`pairkit.core.float16.to_float32`.

Converts blocks of float16 rows (the shapes the IVF lists and gathered rows have in a
``mine`` of a 1,280-d store) both ways, in one process, alternating, and prints the
nanoseconds a value of each and their ratio (best of ``--repeats``). The outputs are
compared bit for bit.

Usage: python tests/benchmarks/float16_convert.py [--dim 1280] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pairkit.core import float16  # noqa: E402


def best_ns(fn, x: np.ndarray, repeats: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn(x)
        best = min(best, time.perf_counter() - t)
    return best / x.size * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dim", type=int, default=1280)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    import torch

    float16.state["torch"] = torch  # as once IMPORT_AFTER values were converted
    rng = np.random.default_rng(0)
    for rows in (64, 330, 4096, 65536):
        x = rng.normal(size=(rows, args.dim)).astype(np.float16)
        a, b = x.astype(np.float32), float16.to_float32(x)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        numpy_ns = best_ns(lambda v: v.astype(np.float32), x, args.repeats)
        fast_ns = best_ns(float16.to_float32, x, args.repeats)
        print(json.dumps({"rows": rows, "dim": args.dim, "numpy_ns_per_value": round(numpy_ns, 3),
                          "to_float32_ns_per_value": round(fast_ns, 3),
                          "x_faster": round(numpy_ns / fast_ns, 1),
                          "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
