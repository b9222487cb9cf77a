"""Whole ``pairkit mine`` with the label-free filter and mined positives against naive mining.

Each round times, as separate processes (what a user pays: imports, store loading, the
search, the false-negative context, the positives, the table), in this order: naive ``mine
--hard -k 5``; ``--filter-false-negatives --fn-rules near-duplicate,mutual-neighbour,cluster
--positives 0``; the same with the default mined positives. Rounds alternate the three so
that a change in the machine's load hits all of them; the best of ``--rounds`` is reported
with the ratios to naive (and each round's own ratios), in wall-clock seconds and in CPU
seconds of the child (user + system; pairkit runs one thread on 2 cores, so its CPU time is
the work itself, which other processes on the cores do not stretch as they do the wall
clock). ``--runs lf`` times naive and the
default only.

``--rows N`` above the store's size makes a larger store from it: every row again with
small Gaussian noise (sigma ``--noise``) as new sources, until N rows (written once under
--work).

The rules are the default ones of a store without labels (the stores here have labels,
which the default would use). Results: docs/benchmarks.md ("Downstream", whole command).

Usage: python tests/benchmarks/mine_positives_speed.py --store STORE --work DIR
    [--rows 200000] [--rounds 3] [--runs lf-negatives,lf]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
LABEL_FREE = ["--filter-false-negatives", "--fn-rules", "near-duplicate,mutual-neighbour,cluster"]
RUNS = {
    "naive": [],
    "lf-negatives": [*LABEL_FREE, "--positives", "0"],  # the filter, no mined positives
    "lf": LABEL_FREE,  # the default: filter + mined positives
}


def grown_store(store: Path, rows: int, work: Path, noise: float, seed: int = 0) -> Path:
    """``store`` grown to ``rows`` rows by noisy copies (new sources), written once."""
    import pandas as pd

    sys.path.insert(0, str(ROOT))
    from pairkit.core.store import Store
    from pairkit.core.store_writer import write_store

    out = work / f"grown-{rows}"
    if (out / "manifest.json").exists():
        return out
    st = Store.open(store)
    x = st.vectors(np.float32)
    items = st.items[["path", "source", "view", "label"]]
    rng = np.random.default_rng(seed)
    parts, tables = [x], [items]
    copy = 0
    while sum(len(p) for p in parts) < rows:
        copy += 1
        y = x + noise * rng.normal(size=x.shape).astype(np.float32)
        parts.append(y / np.linalg.norm(y, axis=1, keepdims=True))
        t = items.copy()
        for col in ("path", "source"):
            t[col] = f"copy{copy}/" + t[col].astype(str)
        tables.append(t)
    vectors = np.concatenate(parts)[:rows]
    table = pd.concat(tables, ignore_index=True).iloc[:rows].reset_index(drop=True)
    write_store(out, vectors, table, encoder=st.encoder)
    return out


def run(store: Path, args: list[str], out: Path) -> tuple[float, float]:
    """One ``pairkit mine`` process: ``(wall seconds, CPU seconds)`` (user + system of the
    child: steadier than the wall clock when other processes share the cores)."""
    import resource

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pairkit", "mine", str(store), "--hard", "-k", "5",
                    "-o", str(out), "--force", "-q", *args], check=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=0)
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", default=",".join(RUNS),
                    help="comma-separated names of RUNS to time (naive is always one)")
    a = ap.parse_args()
    names = ["naive", *[n for n in a.runs.split(",") if n and n != "naive"]]
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        ap.error(f"unknown runs {unknown}; choose from {list(RUNS)}")
    a.work.mkdir(parents=True, exist_ok=True)
    store = grown_store(a.store, a.rows, a.work, a.noise) if a.rows else a.store
    load0 = os.getloadavg()[0]
    times: dict[str, list[float]] = {k: [] for k in names}
    cpus: dict[str, list[float]] = {k: [] for k in names}
    for r in range(a.rounds):
        for name in names:
            wall, cpu = run(store, RUNS[name], a.work / "pairs.parquet")
            times[name].append(wall)
            cpus[name].append(cpu)
            print(json.dumps({"round": r, "run": name, "seconds": round(wall, 2),
                              "cpu_seconds": round(cpu, 2)}), flush=True)
    best = {k: min(v) for k, v in times.items()}
    best_cpu = {k: min(v) for k, v in cpus.items()}
    print(json.dumps({"store": str(store), "rows": a.rows or None, "rounds": a.rounds,
                      "best_seconds": {k: round(v, 2) for k, v in best.items()},
                      "x_naive": {k: round(v / best["naive"], 2) for k, v in best.items()},
                      "x_naive_per_round": {k: [round(t / n, 2) for t, n in
                                                zip(v, times["naive"], strict=True)]
                                            for k, v in times.items() if k != "naive"},
                      "best_cpu_seconds": {k: round(v, 2) for k, v in best_cpu.items()},
                      "cpu_x_naive": {k: round(v / best_cpu["naive"], 2)
                                      for k, v in best_cpu.items()},
                      "load_at_start": load0, "load_at_end": os.getloadavg()[0]}))

if __name__ == "__main__":
    main()
