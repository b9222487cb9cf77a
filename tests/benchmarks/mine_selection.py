"""Benchmark: the CPU selection part of ``pairkit mine --hard -k 5`` at N x d (1M x 512).

"Selection" is everything ``mine`` does after the search hands over the candidates:
choosing each anchor's positive (its score: ``row_dots``), classifying the candidates
(self, positives, same source, margins), ranks, sampling, collecting the K negatives and
the counts, the pair table (``build_pair_table``) and the summary statistics. The search
itself is taken out: the candidates of every anchor are computed once (the other view of
its source plus random rows, with their true scores, best first) and handed over by an
``anchor_searcher`` that only slices them, whose time is subtracted.

The store is made once with ``pairkit import`` (random unit vectors, two views per
source, float16 as ``import`` stores by default). Each measured run is a child process
of its own; ``--before COMMIT`` also runs that commit's code (``git archive`` into the
work folder) on the same store and candidates, alternating with this checkout, and
reports the ratio of the medians (the machine is shared: ratios within one run).
``--write`` also writes each table to parquet as ``mine`` does (``write_table``), timed
apart (not in the total), and compares the files' sha256 (same bytes before and after).

    .venv/bin/python tests/benchmarks/mine_selection.py --n 1000000 --before HEAD~1 \
        [--runs 3] [--write] [--work /tmp/pairkit-mine-selection] [--out result.json]
    .venv/bin/python tests/benchmarks/mine_selection.py --n 20000 --quick  # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
K = 5
WIDTH = 20  # candidates kept per anchor: more than the first search's k (14 here)


def make_store(work: Path, n: int, dim: int) -> Path:
    """``pairkit import`` of n random unit vectors (n/2 sources x 2 views)."""
    store = work / f"store-{n}x{dim}"
    if (store / "manifest.json").is_file():
        return store
    import pandas as pd

    rng = np.random.default_rng(0)
    emb = work / f"emb-{n}x{dim}.npy"
    out = np.lib.format.open_memmap(emb, mode="w+", dtype=np.float32, shape=(n, dim))
    for s in range(0, n, 65536):
        out[s:s + 65536] = rng.standard_normal((min(65536, n - s), dim), dtype=np.float32)
    out.flush()
    del out
    ids = np.arange(n)
    items = pd.DataFrame({"path": [f"src{i // 2:07d}/view{i % 2}.jpg" for i in ids],
                          "source": [f"src{i // 2:07d}" for i in ids], "view": ids % 2})
    items.to_parquet(work / "items.parquet", index=False)
    subprocess.run([sys.executable, "-m", "pairkit", "import", str(emb), "--items",
                    str(work / "items.parquet"), "-o", str(store), "-q"], check=True,
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    emb.unlink()
    return store


def make_candidates(work: Path, store_path: Path) -> Path:
    """(N, WIDTH) candidate ids and their scores, best first: the other view, then
    random rows (computed once, with the checkout's code; the search is not measured)."""
    path = work / f"cand-{store_path.name}.npz"
    if path.is_file():
        return path
    sys.path.insert(0, str(ROOT))
    from pairkit.core.store import Store

    x = Store.open(store_path).vectors(np.float32)
    n = len(x)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, n, (n, WIDTH))
    ids[:, 0] = np.arange(n) ^ 1
    scores = np.empty((n, WIDTH), np.float32)
    for s in range(0, n, 8192):
        q = x[s:s + 8192]
        scores[s:s + 8192] = np.einsum("nd,nkd->nk", q, x[ids[s:s + 8192]])
    order = np.argsort(-scores, axis=1, kind="stable")
    np.savez(path, ids=np.take_along_axis(ids, order, 1),
             scores=np.take_along_axis(scores, order, 1))
    return path


CHILD = r"""
import json, sys, time
import numpy as np
store_path, cand_path = sys.argv[1], sys.argv[2]
from pairkit.core.pairs import build_pair_table
from pairkit.core.relations import load_relation
from pairkit.core.store import Store
from pairkit.mine.config import MineConfig
from pairkit.mine.hard_negatives import mine_negatives
from pairkit.mine.stats import summary_stats

st = Store.open(store_path)
x = st.vectors(np.float32)
items = st.items
sources = st.source_codes()
rel = load_relation("instance", items)
paths = items["path"].to_numpy(dtype=object)
c = np.load(cand_path)
ids, scores = c["ids"], c["scores"]
fetch = [0.0]

def searcher(rows, k):
    t = time.perf_counter()
    s, i = scores[rows, :k], ids[rows, :k]
    if k > ids.shape[1]:
        pad = k - ids.shape[1]
        s = np.pad(s, ((0, 0), (0, pad)), constant_values=-np.inf)
        i = np.pad(i, ((0, 0), (0, pad)), constant_values=-1)
    fetch[0] += time.perf_counter() - t
    return s, i

cfg = MineConfig(num_negatives=NUM_NEGATIVES)
t0 = time.perf_counter()
res = mine_negatives(x, sources, rel, cfg, anchor_searcher=searcher)
t1 = time.perf_counter()
table = build_pair_table(res.pairs, "triplet", st.content_id, paths)
t2 = time.perf_counter()
stats = summary_stats(res, cfg.num_negatives, True)
t3 = time.perf_counter()
digest = __import__("hashlib").sha256(
    np.ascontiguousarray(table[["anchor_id", "positive_id", "negative_id", "neg_rank"]]
                         .to_numpy()).tobytes()
    + table["neg_score"].to_numpy().tobytes() + table["pos_score"].to_numpy().tobytes()
    + "\n".join(table["negative_path"]).encode()).hexdigest()
out = {"select": t1 - t0 - fetch[0], "fetch": fetch[0], "table": t2 - t1,
       "stats": t3 - t2, "total": t3 - t0 - fetch[0], "rows": len(table), "digest": digest}
if len(sys.argv) > 3:  # --write: the table written to parquet as mine writes it (not in total)
    from pairkit.core.tables import write_table
    t4 = time.perf_counter()
    write_table(table, sys.argv[3], force=True)
    out["write"] = time.perf_counter() - t4
    out["file_sha256"] = __import__("hashlib").sha256(open(sys.argv[3], "rb").read()).hexdigest()
print(json.dumps(out))
""".replace("NUM_NEGATIVES", str(K))


def run_child(code_root: Path, store: Path, cand: Path, write: Path | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    extra = [str(write)] if write is not None else []
    out = subprocess.run([sys.executable, "-c", CHILD, str(store), str(cand), *extra],
                         env=env, cwd=str(code_root), capture_output=True, text=True,
                         check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if write is not None:
        write.unlink()
    return result


def checkout(work: Path, commit: str) -> Path:
    """The tree of ``commit`` under ``work`` (git archive), for the before runs."""
    sha = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    dest = work / f"code-{sha[:12]}"
    if not dest.is_dir():
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--before", default=None, help="commit to compare with (e.g. HEAD~1)")
    p.add_argument("--work", type=Path, default=Path("/tmp/pairkit-mine-selection"))
    p.add_argument("--quick", action="store_true", help="n = 20,000, one run")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--write", action="store_true",
                   help="also write each table to parquet (timed apart, not in the total; "
                        "the files' sha256 compared)")
    args = p.parse_args()
    if args.quick:
        args.n, args.runs = 20_000, 1
    args.work.mkdir(parents=True, exist_ok=True)
    store = make_store(args.work, args.n, args.dim)
    cand = make_candidates(args.work, store)
    variants = {"after": ROOT}
    if args.before:
        variants = {"before": checkout(args.work, args.before), "after": ROOT}
    results: dict[str, list[dict]] = {name: [] for name in variants}
    load_before = os.getloadavg()
    for _ in range(args.runs):
        for name, code in variants.items():
            target = args.work / "table.parquet" if args.write else None
            results[name].append(run_child(code, store, cand, target))
            print(name, json.dumps(results[name][-1]), flush=True)
    summary: dict = {
        "n": args.n, "dim": args.dim, "k": K, "runs": args.runs,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "load_before": load_before, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                              time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip(),
    }
    for name, runs in results.items():
        summary[name] = {key: round(statistics.median(r[key] for r in runs), 3)
                         for key in ("select", "table", "stats", "total")}
        summary[name]["digest"] = runs[0]["digest"]
        if args.write:
            summary[name]["write"] = round(statistics.median(r["write"] for r in runs), 3)
            summary[name]["file_sha256"] = runs[0]["file_sha256"]
        summary[name]["rows"] = runs[0]["rows"]
    if "before" in results:
        b, a = summary["before"], summary["after"]
        summary["speedup"] = {key: round(b[key] / max(a[key], 1e-9), 2)
                              for key in ("select", "table", "stats", "total")}
        summary["same_table"] = b["digest"] == a["digest"]
        if args.write:
            summary["same_file"] = b["file_sha256"] == a["file_sha256"]
            summary["speedup"]["write"] = round(b["write"] / max(a["write"], 1e-9), 2)
    summary["load_after"] = os.getloadavg()
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
