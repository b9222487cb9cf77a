"""Benchmark: does the exact range search by k-means partitions
(``pairkit/index/partitioned_range.py``) cut the work on a store's embedding, against the
global range search that ``dedup`` otherwise runs?

For each partition size and threshold: the counted plan (partitions, routes a row, the
share of the global search's comparisons, whether :meth:`Plan.worth_it`), then the search
by partitions forced (``plan_pairs``) and the global one (``range_search_blocks``), timed
in this process one after the other, and whether they found the same pairs.

    .venv/bin/python tests/benchmarks/partitioned_range.py STORE \\
        --rows-per-part 500 2000 --thresholds 0.9 0.95 0.98 [--rows 100000]

STORE: any pairkit store (e.g. real images through ``pairkit embed --model
timm/tf_efficientnet_lite0 --checkpoint FILE``, tests/benchmarks/real_data.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--rows", type=int, help="the first ROWS rows only")
    parser.add_argument("--rows-per-part", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.9, 0.95, 0.98])
    args = parser.parse_args()

    from pairkit.core.store import Store
    from pairkit.index.partitioned_range import map_here, plan_pairs, plan_partitions
    from pairkit.index.range_search import range_search_blocks

    x = np.ascontiguousarray(Store.open(args.store).vectors()[: args.rows], np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    for per in args.rows_per_part:
        for t in args.thresholds:
            t0 = time.perf_counter()
            plan = plan_partitions(x, t, map_here, rows_per_part=per)
            planned = time.perf_counter() - t0
            found = {(int(a), int(b)) for p in plan_pairs(x, plan, map_here)
                     for a, b in zip(p[0], p[1], strict=True)}
            parted = time.perf_counter() - t0
            t0 = time.perf_counter()
            want = {(int(a), int(b)) for p in range_search_blocks(
                x, x, t, batch_size=4096, device="cpu", backend="faiss")
                for a, b in zip(p[0], p[1], strict=True) if a < b}
            print(json.dumps({"rows": len(x), "dim": x.shape[1], "rows_per_part": per,
                              "threshold": t, **plan.stats(),
                              "routes_a_row": round(plan.stats()["routed"] / len(x), 2),
                              "plan_s": round(planned, 2), "partitioned_s": round(parted, 2),
                              "global_s": round(time.perf_counter() - t0, 2),
                              "pairs": len(want), "same": found == want}), flush=True)


if __name__ == "__main__":
    main()
