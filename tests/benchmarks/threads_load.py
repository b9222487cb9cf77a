"""The demo with and without a concurrent CPU load, before and after the thread budget.

    python tests/benchmarks/threads_load.py --before /tmp/pairkit-before --out threads.json
    python tests/benchmarks/threads_load.py --before /tmp/pairkit-before --step train \
        --rounds 5 --out threads-train.json

``--step demo`` runs ``pairkit demo`` (the whole pipeline) in fresh folders; ``--step
train`` runs only the demo's training step (``pairkit train`` on the demo's store and
pairs, 3 epochs; short, so several rounds fit while the background load stays alike).
Settings, in interleaved rounds so that drifting background load hits each alike:

- ``before``: the code at ``--before`` (a checkout without pairkit/core/threads.py),
  libraries at their defaults (torch, FAISS/OpenMP and BLAS: one thread per core).
- ``after``: this checkout, default budget (half the CPUs, at least 1).
- ``after, all cores``: this checkout with ``pairkit --threads <CPUs>``.

each quiet and beside ``--busy`` busy-loop processes (default: one per CPU), and records
wall time, the training rate (pairs/s over all epochs, from the head's train_log.jsonl)
and the load average before each run. Thread variables of the calling shell are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "PAIRKIT_THREADS", "OMP_WAIT_POLICY")
BUSY = "while True:\n    pass\n"


def train_rate(head: Path) -> float | None:
    log = head / "train_log.jsonl"
    if not log.is_file():
        return None
    rows = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    epochs = [r for r in rows if "epoch" in r and "seconds" in r]
    pairs = sum(r.get("pairs", r["pairs_per_s"] * r["seconds"]) for r in epochs)
    seconds = sum(r["seconds"] for r in epochs)
    return pairs / seconds if seconds else None


def run_step(code_root: Path, extra: list[str], step: str, limit: int | None, work: Path,
             prepared: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env["PYTHONPATH"] = str(code_root)
    env["HF_HUB_OFFLINE"] = "1"
    out = work / f"run-{time.monotonic_ns()}"
    if step == "demo":
        args = [sys.executable, "-m", "pairkit", *extra, "demo", str(out)]
        args += ["--limit", str(limit)] if limit else []
        head = out / "head"
    else:
        assert prepared is not None
        head = out / "head"
        args = [sys.executable, "-m", "pairkit", *extra, "train", str(prepared / "store"),
                "--pairs", str(prepared / "pairs.parquet"), "-o", str(head), "--epochs", "3",
                "-q"]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({' '.join(args)}):\n{proc.stderr[-2000:]}")
    return {"seconds": round(seconds, 1), "train_pairs_per_s": train_rate(head),
            "loadavg_1min_before": round(load, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True,
                    help="checkout of pairkit before the thread budget")
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 1,
                    help="busy-loop processes during the loaded runs")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--step", choices=("demo", "train"), default="demo")
    ap.add_argument("--limit", type=int, default=None, help="demo --limit (default: all)")
    ap.add_argument("--out", type=Path, default=Path("threads_load.json"))
    args = ap.parse_args()
    cpus = len(os.sched_getaffinity(0))
    settings = {
        "before (library defaults)": (args.before, []),
        "after (default budget)": (ROOT, []),
        f"after (--threads {cpus})": (ROOT, ["--threads", str(cpus)]),
    }
    results: dict[str, dict[str, list[dict]]] = {name: {"quiet": [], "loaded": []}
                                                 for name in settings}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prepared = None
        if args.step == "train":  # the demo's store and pairs, made once
            prepared = work / "prepared"
            subprocess.run([sys.executable, "-m", "pairkit", "demo", str(prepared)]
                           + (["--limit", str(args.limit)] if args.limit else []),
                           check=True, capture_output=True, env={**os.environ,
                                                                 "PYTHONPATH": str(ROOT)})
        for r in range(args.rounds):
            for loaded in (False, True):
                for name, (code_root, extra) in settings.items():
                    busy = [subprocess.Popen([sys.executable, "-c", BUSY])
                            for _ in range(args.busy if loaded else 0)]
                    try:
                        time.sleep(1.0 if busy else 0.0)
                        got = run_step(code_root, extra, args.step, args.limit, work,
                                       prepared)
                    finally:
                        for p in busy:
                            p.kill()
                            p.wait()
                    key = "loaded" if loaded else "quiet"
                    results[name][key].append(got)
                    print(f"round {r + 1} {key:6} {name:28} {got}", flush=True)
    summary = {"cpus": cpus, "busy_processes": args.busy, "limit": args.limit,
               "step": args.step,
               "date": time.strftime("%Y-%m-%d %H:%M"), "results": results}
    args.out.write_text(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
