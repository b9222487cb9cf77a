"""What opening a store costs: Store.open with and without verify, then items and vectors.

    python tests/benchmarks/store_open.py [--rows 500000] [--dim 128] [--repeats 3]

Uses only APIs every pairkit version has (write_store, Store.open), so the same script
compares two checkouts: run it with PYTHONPATH pointing at each, in one session.
Prints one JSON line: median seconds of each step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from pairkit.core.store import Store
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(0)
    n = args.rows
    x = rng.normal(size=(n, args.dim)).astype(np.float32)
    items = pd.DataFrame({
        "path": [f"class{i % 100}/img{i:07d}.jpg" for i in range(n)],
        "label": [f"class{i % 100}" for i in range(n)],
        "file_sha256": [f"{i:064x}" for i in range(n)],
    })
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        t0 = time.perf_counter()
        write_store(root, x, items, shard_rows=65536)
        write_s = time.perf_counter() - t0
        times: dict[str, list[float]] = {"open_verify": [], "open_no_verify": [],
                                         "items": [], "vectors": []}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            Store.open(root, verify=False)
            times["open_no_verify"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            store = Store.open(root, verify=True)
            times["open_verify"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert len(store.items) == n
            times["items"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert store.vectors().shape == (n, args.dim)
            times["vectors"].append(time.perf_counter() - t0)
    out = {k: round(statistics.median(v), 3) for k, v in times.items()}
    out.update(rows=n, dim=args.dim, write_store=round(write_s, 2))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
