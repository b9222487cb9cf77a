"""Benchmark: `pairkit mine --ray local` against the local command, and 1 vs 2 workers.

A store of N L2-normalised 512-d vectors (the clustered data of ``mine_speed.py``, two
views per source) is mined with ``--hard -k 5`` (``--index auto``: exact up to 50,000
rows, IVF above; the IVF index is built once either way). Every run is a whole
``pairkit`` process (start-up, store check, index, Ray start-up, search, selection,
parquet output), timed from outside; the runs alternate, ``--repeats`` times each, and
every table is compared with the local one (they must be equal).

Runs, all on the same CPUs (``pairkit --threads`` is the CPUs of one process, so a Ray
worker has that many and a local cluster of C CPUs runs C / threads workers):

- ``local, 1 thread``: ``pairkit --threads 1 mine`` (the default budget on 2 CPUs: the
  baseline of the ratios);
- ``ray local, 2 workers x 1 thread``: ``pairkit --threads 1 mine --ray local`` (what
  ``--ray local`` does by default on 2 CPUs);
- ``ray local, 1 worker x 2 threads``: ``pairkit --threads 2 mine --ray local``;
- ``local, 2 threads``: ``pairkit --threads 2 mine`` (one process, two threads);
- ``ray local on 1 CPU, 1 worker x 1 thread`` and ``local on 1 CPU, 1 thread``: the same
  commands pinned to CPU 0 (``taskset -c 0``: Ray sees one CPU, so one worker; the driver
  and Ray's own processes share that CPU): 1 worker against the 2 workers above.

Goal (issue 12): the whole ``--ray local`` command within 1.5x of the local command.

    .venv/bin/python tests/benchmarks/ray_scaling.py [--rows 100000] [--repeats 2] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

RUNS = {
    "local, 1 thread": ["--threads", "1", "mine"],
    "ray local, 2 workers x 1 thread": ["--threads", "1", "mine", "--ray", "local"],
    "ray local, 1 worker x 2 threads": ["--threads", "2", "mine", "--ray", "local"],
    "local, 2 threads": ["--threads", "2", "mine"],
    "ray local on 1 CPU, 1 worker x 1 thread": ["--threads", "1", "mine", "--ray", "local"],
    "local on 1 CPU, 1 thread": ["--threads", "1", "mine"],
}
PINNED = ("taskset", "-c", "0")  # the runs named "on 1 CPU"
BASE = "local, 1 thread"


def run(args: list[str], store: Path, out: Path, extra: list[str],
        prefix: tuple[str, ...] = ()) -> tuple[float, str]:
    cmd = [*prefix, sys.executable, "-m", "pairkit", args[0], args[1], args[2], str(store),
           "--hard", "-k", "5", "-o", str(out), "--force", *extra, *args[3:]]
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PAIRKIT_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    index_line = next((line for line in proc.stderr.splitlines()
                       if line.startswith("relation:")), "")
    return wall, index_line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16384)
    ap.add_argument("--runs", default=";".join(RUNS), help="run names, separated by ;")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    import pandas as pd
    from mine_speed import make_store, make_vectors

    names = [n.strip() for n in a.runs.split(";")]
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="pairkit-ray-") as tmp:
        store = Path(tmp) / "store"
        vectors, sources = make_vectors(a.rows, a.dim, seed=0)
        make_store(store, vectors, sources)
        del vectors
        extra = ["--batch-size", str(a.batch_size)]
        times: dict[str, list[float]] = {n: [] for n in names}
        lines: dict[str, str] = {}
        reference = None
        for rep in range(a.repeats):
            for name in names:
                out = Path(tmp) / f"pairs-{len(lines)}.parquet"
                wall, line = run(RUNS[name], store, out, extra,
                                 PINNED if "on 1 CPU" in name else ())
                times[name].append(round(wall, 2))
                lines[name] = line
                table = pd.read_parquet(out)
                if reference is None:
                    reference = table
                elif not table.equals(reference):
                    raise SystemExit(f"{name}: the table differs from the first run's")
                print(f"repeat {rep + 1}: {name}: {wall:.2f} s", file=sys.stderr, flush=True)
    medians = {n: statistics.median(t) for n, t in times.items()}
    base = medians.get(BASE)
    result = {
        "rows": a.rows, "dim": a.dim, "batch_size": a.batch_size, "repeats": a.repeats,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "load_average_at_start": load0, "load_average_at_end": os.getloadavg(),
        "seconds": times, "median_seconds": medians,
        "ratio_to_local_1_thread": ({n: round(m / base, 3) for n, m in medians.items()}
                                     if base else None),
        "summary_lines": lines, "tables_equal": True,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
