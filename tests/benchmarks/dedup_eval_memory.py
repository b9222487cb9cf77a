"""Benchmark: the driver's peak memory of ``pairkit dedup --ray`` and ``pairkit eval --ray``
against the store size (issue 22: "dedup and eval the same way": the driver holds no
vectors, the workers read the store).

Stores of N x 128 float16 rows (two views per source, 1,000 clusters, a label per source
from its cluster, 1% of the sources planted as near-copies of another; ``--clustered``:
one cluster per 4,096 sources, so that dedup's plan takes the k-means partitions, and
with ``--nearby N`` the clusters in groups of N, so that a source is routed to about N
partitions) are written shard by shard; each command runs in a child process that
reports its own peak resident set (``VmHWM``: the driver alone, not Ray's processes) and
the wall time:

- ``dedup STORE --threshold 0.95 --ray local -o groups.parquet``
- ``eval STORE --ray local --knn-k 20 --json`` (kNN, retrieval, linear probe on 200,000
  references at most, geometry, or ``--metrics``; queries: a 2% test split,
  ``--test-fraction 0.02`` (or the fraction given), or about ``--queries`` N at every size)

With ``--s3`` the store is uploaded to a local S3 server (moto_server, started here) and
read from there. ``--code DIR`` runs another checkout's pairkit (the "before" figures:
e.g. a ``git worktree`` of the commit before the change), same stores, same commands.

    .venv/bin/python tests/benchmarks/dedup_eval_memory.py --rows 250000 1000000 \
        --store-dir /tmp/stores --out after.json
    git worktree add /tmp/before 5327d80
    .venv/bin/python tests/benchmarks/dedup_eval_memory.py --rows 250000 1000000 \
        --store-dir /tmp/stores --code /tmp/before --out before.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.benchmarks, tests.s3server

DIM = 128
CHILD = """
import atexit, json, sys
def hwm():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1e6
atexit.register(lambda: print(json.dumps({"hwm_gb": hwm()}), file=sys.stderr))
from pairkit.cli.main import app
sys.argv = ["pairkit", *sys.argv[1:]]
app()
"""


def make_store(path: Path, rows: int, seed: int = 0, shard: int = 1 << 16,
               clusters: int = 1000, nearby: int = 1) -> None:
    """``rows`` float16 rows around ``clusters`` centres, written shard by shard (see the
    module docstring); ``nearby`` > 1: the centres in groups of that many near one
    another (about 0.6 rad apart: a row is within reach of its group's clusters)."""
    import numpy as np
    import pandas as pd

    from pairkit.core.store_writer import StoreWriter, prepare_store_dir

    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, DIM)).astype(np.float32)
    if nearby > 1:
        groups = rng.normal(size=(-(-clusters // nearby), DIM)).astype(np.float32)
        centers = groups[np.arange(clusters) // nearby] + 0.5 * centers
    prepare_store_dir(path, force=True)
    with StoreWriter.create(path, DIM, "float16", {"name": "random"}, {"views": 2},
                            commit=False) as writer:
        for start in range(0, rows, shard):
            n = min(shard, rows - start)
            source = np.arange(start, start + n) // 2
            first = np.flatnonzero(np.r_[True, source[1:] != source[:-1]])
            src = source[first]
            base = centers[src % clusters] + 0.6 * rng.normal(size=(len(first), DIM))
            copies = rng.random(len(first)) < 0.01  # a near-copy of the previous source
            copies[0] = False
            base[copies] = base[np.flatnonzero(copies) - 1] + 0.01 * rng.normal(
                size=(int(copies.sum()), DIM))
            per_row = np.cumsum(np.r_[True, source[1:] != source[:-1]]) - 1
            x = base[per_row] + 0.05 * rng.normal(size=(n, DIM))
            items = pd.DataFrame({"path": [f"s{s}.jpg" for s in source],
                                  "view": (np.arange(start, start + n) % 2).astype(np.int16),
                                  "label": [f"c{c % 10}" for c in source % clusters]})
            writer.add_shard(x.astype(np.float32), items)
        writer.commit()


def run_child(code: Path, argv: list[str], env_extra: dict[str, str]) -> dict[str, Any]:
    """One command in a child process of ``code``'s pairkit: its peak RSS, time, exit."""
    env = dict(os.environ, PYTHONPATH=str(code), **env_extra)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, *argv], cwd=code, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    hwm = None
    for line in proc.stderr.splitlines():
        if line.startswith('{"hwm_gb"'):
            hwm = json.loads(line)["hwm_gb"]
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    # dedup's summary (stderr): its search line says whether partitions were searched
    plan = [line for line in proc.stderr.splitlines() if "search on" in line]
    return {"driver_hwm_gb": hwm, "seconds": round(seconds, 1), "exit": proc.returncode,
            "stdout_tail": proc.stdout[-300:] if proc.returncode == 0 else "",
            **({"plan": plan[-1].split("search on", 1)[1].strip()} if plan else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--commands", nargs="+", choices=("dedup", "eval"),
                        default=["dedup", "eval"])
    parser.add_argument("--code", type=Path, default=ROOT,
                        help="the checkout whose pairkit runs (default: this one)")
    parser.add_argument("--s3", action="store_true", help="the stores on a local S3 server")
    parser.add_argument("--store-dir", type=Path, help="keep the generated stores here "
                        "(reused when present) instead of a temp dir")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--clustered", action="store_true",
                        help="one cluster per 4,096 sources (as many as dedup's k-means "
                             "partitions) instead of 1,000: the plan takes the partitions")
    parser.add_argument("--nearby", type=int, default=1,
                        help="with --clustered: the clusters in groups of this many near "
                             "one another, so that a row is routed to about as many "
                             "partitions (default 1: independent clusters)")
    parser.add_argument("--queries", type=int, default=0,
                        help="eval's queries: about this many at every size (the test "
                             "fraction QUERIES / rows), so that the search grows with the "
                             "references only (default: a 2%% test split)")
    parser.add_argument("--test-fraction", type=float, default=0.02,
                        help="eval's test split without --queries (eval's own default is 0.2)")
    parser.add_argument("--metrics", default="",
                        help="eval's --metrics (default: every metric; e.g. linear,geometry "
                             "to leave out the search)")
    args = parser.parse_args()

    from tests.benchmarks.mine_memory import S3Bench

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, \
            (S3Bench() if args.s3 else contextlib.nullcontext()) as s3:
        stores = args.store_dir or Path(tmp)
        for rows in args.rows:
            clusters = max(1, rows // 8192) if args.clustered else 1000
            name = f"clustered{rows}" + (f"-nearby{args.nearby}" if args.nearby > 1 else "")
            path = stores / (name if args.clustered else f"labelled{rows}")
            if not (path / "manifest.json").exists():
                make_store(path, rows, clusters=clusters,
                           nearby=args.nearby if args.clustered else 1)
            where = s3.upload(path) if s3 is not None else str(path)
            env = s3.env if s3 is not None else {}
            for command in args.commands:
                out = Path(tmp) / f"{command}{rows}.parquet"
                argv = (["dedup", where, "--threshold", "0.95", "--ray", "local", "-o",
                         str(out), "--force"] if command == "dedup" else
                        ["eval", where, "--ray", "local", "--knn-k", "20",
                         "--test-fraction",
                         str(args.queries / rows if args.queries else args.test_fraction),
                         "--json", "-q", *(["--metrics", args.metrics] if args.metrics
                                           else [])])
                got = run_child(args.code, argv, env)
                row = {"command": command, "rows": rows, "s3": args.s3,
                       "queries": args.queries or None, "test_fraction": args.test_fraction,
                       "metrics": args.metrics or "all",
                       "code": str(args.code), **got}
                print(json.dumps(row), flush=True)
                results.append(row)
    if args.out:
        args.out.write_text(json.dumps({
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "date": time.strftime("%Y-%m-%d"), "load": os.getloadavg(),
            "results": results}, indent=1))


if __name__ == "__main__":
    main()
