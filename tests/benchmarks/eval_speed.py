"""Benchmark: kNN + retrieval metrics of `pairkit eval` at scale, against
pytorch-metric-learning's AccuracyCalculator.

Default (full) size: 100,000 queries against 1,000,000 references, d = 512,
float16 stores, 1,000 classes. ``--quick``: 5,000 x 50,000. Each measurement
runs in a child process so its peak RSS is its own. pairkit runs kNN (k = 20)
and retrieval (precision@1, R-precision, MAP@R, recall@1/5/10) through the
batched search (memory O(block x k) beyond the index); AccuracyCalculator runs
precision@1, R-precision and MAP@R, with k = "max_bin_count" (exact) and with its default k = None
(every reference is a neighbour: an nq x n_ref matrix), on a ladder of sizes up
to the same size; the table shows where it stops (time-out or out of memory
under ``--pml-mem-gb``).

    .venv/bin/python tests/benchmarks/eval_speed.py --quick [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_store(path: Path, n: int, dim: int, classes: int, seed: int, prefix: str,
               centres: np.ndarray, noise: float) -> None:
    """A float16 store of ``n`` clustered unit vectors, written shard by shard."""
    import pandas as pd

    from pairkit.core.store_writer import StoreWriter, prepare_store_dir

    root = prepare_store_dir(path, force=True)
    writer = StoreWriter.create(root, dim, "float16", {"name": "bench"})
    rng = np.random.default_rng(seed)
    block = 131072
    for start in range(0, n, block):
        m = min(block, n - start)
        labels = rng.integers(0, classes, size=m)
        x = centres[labels] + noise * rng.standard_normal((m, dim), dtype=np.float32)
        ids = np.arange(start, start + m)
        items = pd.DataFrame({"path": [f"{prefix}{i}.jpg" for i in ids],
                              "source": [f"{prefix}{i}" for i in ids],
                              "label": [f"c{c}" for c in labels]})
        writer.append(x, items)


def child_pairkit(ref: str, queries: str, threads: int) -> dict:
    """kNN + retrieval through pairkit's own path (stores -> sides -> evaluate)."""
    import faiss

    from pairkit.eval.command import load_sides
    from pairkit.eval.run import EvalConfig, evaluate

    if threads:
        faiss.omp_set_num_threads(threads)
    t0 = time.perf_counter()
    sides = load_sides(Path(ref), Path(queries), 0.2, 0)
    t_load = time.perf_counter() - t0
    cfg = EvalConfig(knn_ks=(20,), metrics=("knn", "retrieval"), max_r=1000, device="auto")
    t1 = time.perf_counter()
    report = evaluate(sides.queries, sides.references, cfg, self_rows=sides.self_rows)
    t_eval = time.perf_counter() - t1
    return {"load_s": t_load, "eval_s": t_eval, "peak_rss_mb": _peak_rss_mb(),
            "metrics": report.metrics, "notes": report.notes}


def child_pml(ref: str, queries: str, n_ref: int, n_q: int, k_mode: str, mem_gb: float,
              threads: int) -> dict:
    """AccuracyCalculator on the first n_q queries and n_ref references.

    ``k_mode``: "default" (k=None: every reference is a neighbour, an nq x n_ref
    matrix) or "max_bin_count" (k = the largest class; exact R-precision/MAP@R).
    The parent enforces the ``--pml-mem-gb`` RSS cap (``mem_gb`` is unused here).
    """
    del mem_gb
    import faiss
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    from pairkit.core.store import Store

    if threads:
        faiss.omp_set_num_threads(threads)
        torch.set_num_threads(threads)
    rs, qs = Store.open(ref, verify=False), Store.open(queries, verify=False)
    import pandas as pd

    codes, _ = pd.factorize(pd.concat([qs.items["label"], rs.items["label"]]))
    ql, rl = codes[: qs.count][:n_q], codes[qs.count :][:n_ref]
    q = torch.from_numpy(qs.vectors(np.float32)[:n_q])
    r = torch.from_numpy(rs.vectors(np.float32)[:n_ref])
    calc = AccuracyCalculator(include=("precision_at_1", "r_precision",
                                       "mean_average_precision_at_r"),
                              k=None if k_mode == "default" else "max_bin_count",
                              device=torch.device("cpu"))
    t0 = time.perf_counter()
    res = calc.get_accuracy(q, torch.from_numpy(ql), r, torch.from_numpy(rl),
                            ref_includes_query=False)
    return {"eval_s": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(),
            "metrics": {"precision_at_1": res["precision_at_1"],
                        "r_precision": res["r_precision"],
                        "map_at_r": res["mean_average_precision_at_r"]}}


def _rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def _run_child(args: list[str], timeout: float, rss_cap_gb: float = 0.0) -> dict:
    """Run one measurement in a child; kill it past ``timeout`` s or ``rss_cap_gb`` RSS."""
    cmd = [sys.executable, __file__, "--child", *args]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        start, peak = time.perf_counter(), 0.0
        while proc.poll() is None:
            peak = max(peak, _rss_mb(proc.pid))
            if rss_cap_gb and peak > rss_cap_gb * 1024:
                proc.kill()
                proc.wait()
                return {"error": f"out of memory: passed the {rss_cap_gb:g} GB RSS cap"}
            if time.perf_counter() - start > timeout:
                proc.kill()
                proc.wait()
                return {"error": f"timeout after {timeout:.0f} s"}
            time.sleep(0.02)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        tail = (stderr.strip().splitlines() or [""])[-1]
        if proc.returncode in (-9, 137) or "MemoryError" in stderr or "alloc" in tail:
            return {"error": f"out of memory ({tail[:120]})"}
        return {"error": f"exit {proc.returncode}: {tail[:160]}"}
    result = json.loads(stdout.strip().splitlines()[-1])
    # The child's own getrusage maxrss would include the parent's memory at fork time
    # (Linux keeps the pre-exec peak); the polled VmRSS is the child's alone.
    result["peak_rss_mb"] = peak
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="5,000 x 50,000 instead of 100k x 1M")
    p.add_argument("--queries", type=int, default=None)
    p.add_argument("--references", type=int, default=None)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--noise", type=float, default=3.0,
                   help="Noise per coordinate around class centres (centres ~ N(0, 1))")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = all)")
    p.add_argument("--timeout", type=float, default=3600.0, help="Per measurement, seconds")
    p.add_argument("--data-dir", type=Path, default=None, help="Keep the generated stores here")
    p.add_argument("--pml-mem-gb", type=float, default=None,
                   help="RSS cap for the AccuracyCalculator runs, GB: a run past it is killed "
                   "and reported out of memory (default: 4 with --quick, none otherwise)")
    p.add_argument("--out", type=Path, default=None, help="Write the results as JSON")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        role, ref, queries, *rest = a.child
        threads = int(rest[-1])
        out = (child_pairkit(ref, queries, threads) if role == "pairkit"
               else child_pml(ref, queries, int(rest[0]), int(rest[1]), rest[2],
                              float(rest[3]), threads))
        print(json.dumps(out))
        return
    n_q = a.queries or (5_000 if a.quick else 100_000)
    n_r = a.references or (50_000 if a.quick else 1_000_000)
    tmp = tempfile.TemporaryDirectory() if a.data_dir is None else None
    data = Path(tmp.name) if tmp else a.data_dir
    centres = np.random.default_rng(0).standard_normal((a.classes, a.dim)).astype(np.float32)
    noise = a.noise
    t0 = time.perf_counter()
    make_store(data / "ref", n_r, a.dim, a.classes, 1, "r", centres, noise)
    make_store(data / "queries", n_q, a.dim, a.classes, 2, "q", centres, noise)
    gen_s = time.perf_counter() - t0
    ours = _run_child(["pairkit", str(data / "ref"), str(data / "queries"), str(a.threads)],
                      a.timeout)
    ladder = sorted({min(n_r, s) for s in (n_r // 20, n_r // 5, n_r // 2, n_r)} - {0})
    mem_gb = a.pml_mem_gb if a.pml_mem_gb is not None else (4.0 if a.quick else 0.0)
    pml = []
    for k_mode in ("max_bin_count", "default"):
        for size in ladder:
            nq = max(1, n_q * size // n_r)
            res = _run_child(["pml", str(data / "ref"), str(data / "queries"), str(size),
                              str(nq), k_mode, str(mem_gb), str(a.threads)], a.timeout, mem_gb)
            pml.append({"k": k_mode, "references": size, "queries": nq, **res})
            if "error" in res:
                break
    result = {"queries": n_q, "references": n_r, "dim": a.dim, "classes": a.classes,
              "store_dtype": "float16", "threads": a.threads or os.cpu_count(),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "generate_s": gen_s,
              "pml_mem_cap_gb": mem_gb or None, "pairkit": ours, "pml": pml}
    print(f"\n{n_q:,} queries x {n_r:,} references, d={a.dim}, float16 store, "
          f"{a.classes} classes, {result['machine']}\n")
    print("| run | queries | references | time (s) | peak RSS (MB) | P@1 | R-precision | MAP@R |")
    print("|---|---|---|---|---|---|---|---|")

    def row(name: str, nq: int, nr: int, r: dict) -> None:
        if "error" in r:
            print(f"| {name} | {nq:,} | {nr:,} | {r['error']} | | | | |")
            return
        m = r["metrics"]
        t = r["eval_s"] + r.get("load_s", 0.0)
        print(f"| {name} | {nq:,} | {nr:,} | {t:.1f} | {r['peak_rss_mb']:.0f} | "
              f"{m.get('precision_at_1', float('nan')):.4f} | "
              f"{m.get('r_precision', float('nan')):.4f} | {m.get('map_at_r', float('nan')):.4f} |")

    row("pairkit eval (kNN k=20 + retrieval)", n_q, n_r, ours)
    for r in pml:
        k_text = "k=max_bin_count" if r["k"] == "max_bin_count" else "default k=None"
        row(f"pml AccuracyCalculator ({k_text})", r["queries"], r["references"], r)
    if mem_gb:
        print(f"\nAccuracyCalculator runs killed past {mem_gb:g} GB resident memory.")
    if "metrics" in ours:
        print(f"\npairkit kNN top-1 {ours['metrics'].get('knn_top1', float('nan')):.4f}, "
              f"load {ours['load_s']:.1f} s, metrics {ours['eval_s']:.1f} s")
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
