"""Benchmark: peak memory (RSS) of a whole ``pairkit mine`` process against the store size.

Stores of N x 128 float16 rows (clustered random unit vectors, two views per source,
written shard by shard so generating them needs little memory) are mined with
``pairkit mine STORE --hard -k 5 --index ivf -o pairs.parquet`` (and, with ``--ray``,
``--ray local``); each run is a child process whose peak RSS is read from the kernel
(``os.wait4``: ``ru_maxrss``, the largest resident set of that process; for ``--ray`` the
driver process only, Ray's workers are other processes). The table is checked to have
5 negatives per anchor.

Goal (issue 22): driver peak RSS of ``mine --ray`` flat (within 1.3x) from 1M to 8M rows;
single-machine ``mine`` of 8M x 128 float16 under 3 GB. Run the sizes your machine allows
and report the figures with the machine, date and load (docs/benchmarks.md).

    .venv/bin/python tests/benchmarks/mine_memory.py --rows 125000 250000 500000 [--ray]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIM = 128


def make_store(path: Path, rows: int, seed: int = 0, shard: int = 1 << 16) -> None:
    """``rows`` float16 rows (two views per source, 1,000 clusters), shard by shard."""
    import numpy as np
    import pandas as pd

    from pairkit.core.store_writer import StoreWriter, prepare_store_dir

    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(1000, DIM)).astype(np.float32)
    prepare_store_dir(path, force=True)
    with StoreWriter.create(path, DIM, "float16", {"name": "random"}, {"views": 2},
                            commit=False) as writer:
        for start in range(0, rows, shard):
            n = min(shard, rows - start)
            ids = np.arange(start, start + n)
            source = ids // 2
            first = np.flatnonzero(np.r_[True, source[1:] != source[:-1]])
            base = centers[source[first] % 1000] + 0.6 * rng.normal(
                size=(len(first), DIM)).astype(np.float32)
            base = base[np.cumsum(np.r_[True, source[1:] != source[:-1]]) - 1]
            x = base + 0.05 * rng.normal(size=(n, DIM)).astype(np.float32)
            items = pd.DataFrame({"path": [f"s{s}.jpg" for s in source],
                                  "view": (ids % 2).astype(np.int16)})
            writer.add_shard(x, items)
        writer.commit()


def peak_rss(cmd: list[str]) -> tuple[float, float, int]:
    """(peak RSS in GB, seconds, exit code) of one child process."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(err, file=sys.stderr)
    return usage.ru_maxrss / 1e6, seconds, code  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[125_000, 250_000, 500_000])
    parser.add_argument("--ray", action="store_true", help="also mine with --ray local")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    import pandas as pd

    results = []
    with tempfile.TemporaryDirectory(prefix="pairkit-mem-") as tmp:
        for rows in args.rows:
            store = Path(tmp) / f"st{rows}"
            t0 = time.perf_counter()
            make_store(store, rows)
            made = time.perf_counter() - t0
            modes = [("local", [])] + ([("ray local", ["--ray", "local"])] if args.ray else [])
            for name, extra in modes:
                out = Path(tmp) / f"p{rows}.parquet"
                cmd = [sys.executable, "-m", "pairkit", "mine", str(store), "--hard", "-k",
                       "5", "--index", "ivf", "-o", str(out), "--force", "-q", *extra]
                gb, seconds, code = peak_rss(cmd)
                ok = code == 0 and len(pd.read_parquet(out, columns=["anchor_id"])) == 5 * rows
                row = {"rows": rows, "mode": name, "peak_rss_gb": round(gb, 3),
                       "seconds": round(seconds, 1), "ok": ok,
                       "vectors_gb_float16": round(rows * DIM * 2 / 1e9, 3),
                       "store_made_s": round(made, 1), "load": os.getloadavg()[0]}
                results.append(row)
                print(json.dumps(row), flush=True)
    info = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                       f"{platform.python_version()}",
            "date": time.strftime("%Y-%m-%d"), "results": results}
    if args.out:
        args.out.write_text(json.dumps(info, indent=2) + "\n")


if __name__ == "__main__":
    main()
